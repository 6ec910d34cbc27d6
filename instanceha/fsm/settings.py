"""The machine's settings: :class:`Policy`, read from the configuration."""

import dataclasses
from typing import Any


@dataclasses.dataclass(frozen=True)
class Policy:
    grace_period: float = 10.0
    kdump_enabled: bool = False
    # fence_after_dump: a dump delays the power-off (up to kdump_max_dump),
    # never replaces it. evacuate: a kdump message counts as fenced (opt-in
    # for a trusted kdump network).
    kdump_action: str = "fence_after_dump"
    kdump_fence_delay: float = 0.0      # wait this long for a dump to begin
    kdump_timeout: float = 60.0         # a host is dumping this long after a message
    kdump_max_dump: float = 600.0       # power off after this long dumping anyway
    recover_disabled_hosts: bool = False  # recover services an operator disabled
    resume_boot_time: float = 300.0     # after a resume: time to boot and report
    flap_count: int = 3                 # losses within flap_window: held (0: off)
    flap_window: float = 600.0
    retry_backoff: float = 30.0
    retry_backoff_max: float = 600.0
    max_attempts: int = 5
    cleanup_check_interval: float = 5.0
    #: a BMC read reporting Off, with the heartbeat lost, skips the grace
    power_evidence: bool = True
    #: Nova's report_interval: a live nova-compute's updated_at advances
    #: at least this often (the agent's silence is corroborated once Nova
    #: owes a heartbeat it has not recorded)
    nova_report_interval: float = 10.0
    #: how late a heartbeat Nova recorded may be seen (a poll interval and
    #: a read): an advance seen this soon after the agent fell silent may
    #: be from before it
    nova_seen_lag: float = 3.0
    #: a drained host's resume moves the drained servers back
    #: ([maintenance] fail_back; an operator's resume may say otherwise)
    fail_back: bool = False
    #: a host entering its agent's veto gets one restart request for
    #: nova-compute ([agent] restart_compute: soft fencing)
    restart_compute: bool = False
    #: the fewest peers whose fresh reports must say they do not hear a
    #: silent host (and a majority of the agents listing it) for them to
    #: corroborate its silence ([agent] peer_witnesses)
    peer_witnesses: int = 2
    #: the grace period of a silence the peers corroborate
    #: ([agent] peer_corroborated_grace)
    peer_grace: float = 3.0

    @classmethod
    def from_conf(cls, conf: Any) -> "Policy":
        # conf: an oslo.config ConfigOpts (or a stand-in with its groups)
        kdump = getattr(conf, "kdump", None)
        kw = dict(
            grace_period=conf.detection.grace_period,
            recover_disabled_hosts=conf.policy.recover_disabled_hosts,
            resume_boot_time=conf.policy.resume_boot_time,
            flap_count=conf.policy.flap_count,
            flap_window=conf.policy.flap_window,
            retry_backoff=conf.evacuation.retry_backoff,
            retry_backoff_max=conf.evacuation.retry_backoff_max,
            max_attempts=conf.evacuation.max_attempts,
            cleanup_check_interval=conf.evacuation.cleanup_check_interval,
            power_evidence=conf.fencing.power_evidence,
            nova_seen_lag=conf.detection.poll_interval + 1.0,
        )
        maintenance = getattr(conf, "maintenance", None)
        if maintenance is not None:
            kw["fail_back"] = maintenance.fail_back
        agent = getattr(conf, "agent", None)
        if agent is not None and hasattr(agent, "nova_report_interval"):
            kw["nova_report_interval"] = agent.nova_report_interval
        if agent is not None:
            kw["restart_compute"] = bool(getattr(agent, "restart_compute",
                                                 False))
            if hasattr(agent, "peer_witnesses"):
                kw["peer_witnesses"] = agent.peer_witnesses
                kw["peer_grace"] = agent.peer_corroborated_grace
        if kdump is not None:
            action = kdump.action
            if action == "wait":            # the old name of the same thing
                action = "fence_after_dump"
            kw.update(kdump_enabled=kdump.enabled, kdump_action=action,
                      kdump_fence_delay=kdump.fence_delay,
                      kdump_timeout=kdump.timeout,
                      kdump_max_dump=kdump.max_dump_time)
        return cls(**kw)
