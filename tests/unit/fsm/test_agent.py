"""The heartbeat agent in the state machine (issue 23): a silent agent
makes the host suspect at once and it is fenced only once corroborated;
Nova recording a heartbeat after the silence clears it; beats that arrive
veto any fencing; a host without an agent is judged by Nova as before."""

from instanceha.events import (AgentReport, AgentSilence, Event,
                               EventKind as E, PowerReading, ServiceReport)
from instanceha.fsm import machine
from instanceha.fsm.states import Action as A, State as S

# Nova reports every 10 s; the engine polls every 2 s (seen lag 3 s).
P = machine.Policy(grace_period=1, nova_report_interval=10,
                   nova_seen_lag=3)


class Host:
    def __init__(self, policy=P):
        self.rec = machine.HostRecord(id="h", name="c0")
        self.p = policy
        self.actions = []

    def step(self, kind, at, **kw):
        self.rec, self.actions = machine.step(
            self.rec, Event(kind, "h", at, name="c0", **kw), self.p)
        return self.rec.state

    def nova(self, at, updated_at, ok=True, read_at=None):
        """A read of Nova that started at ``read_at`` (default: ``at``)."""
        return self.step(E.HEARTBEAT_OK if ok else E.HEARTBEAT_LOST, at,
                         source="reconciler",
                         payload=ServiceReport(
                             updated_at=updated_at,
                             read_at=at if read_at is None else read_at))

    def beating(self, at, compute=True):
        return self.step(E.AGENT_BEATING, at, source="agent",
                         payload=AgentReport(paths=("mgmt",), boot_id="b1",
                                             last_beat_at=at,
                                             compute=compute))

    def silent(self, at, last_beat_at):
        return self.step(E.AGENT_SILENT, at, source="agent",
                         payload=AgentSilence(last_beat_at=last_beat_at,
                                              paths=("mgmt",)))

    def tick(self, at):
        return self.step(E.TICK, at, source="timer", cluster_ok=True)

    def due(self):
        return machine.next_wakeup(self.rec, self.p)


def test_a_silent_host_is_fenced_once_nova_misses_the_heartbeat_it_owes():
    h = Host()
    h.beating(0)
    assert h.nova(1, updated_at=5000.0) is S.ACTIVE   # Nova's clock
    # Dies at ~5; beats stop; the source says so at 8.
    assert h.silent(8, last_beat_at=5) is S.SUSPECT
    assert "agent silent" in h.rec.reason
    # Nova's report is owed 10 s after it was last seen advancing (1),
    # plus a margin: 12.
    assert h.due() == 12
    assert h.tick(9) is S.SUSPECT          # grace over, not corroborated
    assert h.nova(10, updated_at=5000.0) is S.SUSPECT   # still 'up'
    assert h.tick(12) is S.SUSPECT         # owed, but no read since
    assert machine.agent.wants_nova_read(h.rec, 12, h.p)
    # A read that started after it was owed finds no new heartbeat.
    assert h.nova(12.3, updated_at=5000.0, read_at=12.1) is S.SUSPECT
    assert h.tick(12.4) is S.FENCING and h.actions == [A.FENCE]
    assert "corroborated" in h.rec.reason


def test_time_passing_without_a_read_of_nova_corroborates_nothing():
    """A slow or failing read of Nova must not stand for one that found
    no heartbeat: the silent host waits for a read made after Nova owed
    one."""
    h = Host()
    h.beating(0)
    h.nova(1, updated_at=5000.0)
    h.silent(8, last_beat_at=5)
    # A read that started before the heartbeat was owed, answered late.
    h.nova(30, updated_at=5000.0, read_at=11.9)
    for at in (20, 60, 600):
        assert h.tick(at) is S.SUSPECT and h.actions == []
    assert machine.agent.wants_nova_read(h.rec, 600, h.p)


def test_nova_recording_a_heartbeat_after_the_silence_clears_the_host():
    h = Host()
    h.beating(0)
    h.nova(1, updated_at=5000.0)
    h.silent(8, last_beat_at=5)
    # An advance seen within the lag may be a heartbeat from before the
    # silence: not a proof of life, but it moves what Nova owes.
    assert h.nova(7.5, updated_at=5010.0) is S.SUSPECT
    assert h.due() == 7.5 + 11
    # One seen later is: the agent (or its network) failed, the host
    # lives. Active again, never fenced for the silence.
    assert h.nova(11, updated_at=5020.0) is S.ACTIVE
    assert "agent silent" in h.rec.reason and h.rec.lost_at is None
    assert h.tick(30) is S.ACTIVE


def test_beats_back_within_the_grace_period_clear_the_host():
    h = Host()
    h.beating(0)
    h.silent(8, last_beat_at=5)
    assert h.beating(8.5) is S.ACTIVE and h.rec.lost_at is None
    assert h.tick(30) is S.ACTIVE


def test_a_bmc_reading_off_corroborates_without_waiting_for_nova():
    h = Host()
    h.beating(0)
    h.nova(1, updated_at=5000.0)
    h.silent(8, last_beat_at=5)
    h.step(E.POWER_OFF, 8.2, source="bmc",
           payload=PowerReading(readings=(("redfish:x", "off"),),
                                vouched=True))
    assert h.tick(9) is S.FENCING


def test_while_the_agent_beats_the_host_is_never_fenced():
    h = Host()
    h.beating(0, compute=False)             # only nova-compute died
    assert h.nova(40, updated_at=5000.0, ok=False) is S.SUSPECT
    for at in (45, 60, 600):
        assert h.tick(at) is S.SUSPECT and h.actions == []
    assert "nova-compute down, host alive (agent)" in h.rec.reason
    # Then the host dies too: its beats stop, Nova's loss stands.
    h.silent(601, last_beat_at=598)
    assert h.tick(602) is S.FENCING


def test_beats_arriving_while_nova_says_down_are_said_at_once():
    h = Host()
    h.nova(40, updated_at=5000.0, ok=False)
    assert h.beating(41, compute=False) is S.SUSPECT
    assert h.rec.reason.startswith("nova-compute down, host alive (agent)")
    assert h.tick(100) is S.SUSPECT


def test_a_host_without_an_agent_is_judged_by_nova_as_before():
    h = Host()
    assert h.nova(40, updated_at=5000.0, ok=False) is S.SUSPECT
    assert h.rec.agent == ""
    assert h.tick(40.5) is S.SUSPECT
    assert h.tick(41) is S.FENCING


def test_after_a_restart_the_agents_word_before_it_is_forgotten():
    """A beating agent remembered from before a restart would veto the
    fencing of a host that died while instanceha was down."""
    from instanceha.engine import resume
    h = Host()
    h.beating(0, compute=False)
    h.nova(40, updated_at=5000.0, ok=False)
    rec = resume.from_journal(h.rec.to_dict())
    assert (rec.agent, rec.agent_compute) == ("", None)
    h.rec = rec
    assert h.tick(60) is S.FENCING


def test_status_says_what_the_agent_says():
    from instanceha.cmd.status import format_status
    from instanceha.engine import status
    h = Host()
    assert status.agent_text(h.rec) is None          # no agent heard
    h.beating(0, compute=False)
    assert status.agent_text(h.rec) == (
        "agent beating; it says nova-compute is not running")
    h.nova(40, updated_at=5000.0, ok=False)
    assert status.agent_text(h.rec) == "nova-compute down, host alive (agent)"
    g = Host()
    g.beating(0)
    g.nova(1, updated_at=5000.0)
    g.silent(8, last_beat_at=5)
    g.nova(11, updated_at=5020.0)                     # refuted: active
    assert status.agent_text(g.rec) == "agent silent"
    text = format_status({"hosts": [
        {"id": "h", "name": "c0", "state": "active", "since": 0,
         "reason": "ok", "agent": status.agent_text(g.rec)}]}, now=10)
    assert "[agent silent]" in text


def test_nova_heartbeats_seen_further_apart_than_configured_wait_longer():
    """A report_interval set too short must not corroborate a silence
    before Nova could have missed anything: the step seen between the
    host's heartbeats counts when longer."""
    h = Host()
    h.beating(0)
    h.nova(1, updated_at=5000.0)
    h.nova(31, updated_at=5030.0)            # Nova reports every 30 s
    h.silent(35, last_beat_at=32)
    assert h.due() == 31 + 30 + 1
    h.nova(61.5, updated_at=5030.0)          # a read before it was owed
    assert h.tick(61.6) is S.SUSPECT
    h.nova(62.5, updated_at=5030.0)
    assert h.tick(62.6) is S.FENCING


def test_agent_silences_never_make_a_host_flapping():
    """An agent restarted (or its network lost) again and again while Nova
    hears the host must not hold a real loss later as 'flapping'."""
    h = Host(machine.Policy(grace_period=1, nova_report_interval=10,
                            nova_seen_lag=3, flap_count=2, flap_window=600))
    h.beating(0)
    t = 0
    for i in range(3):
        t += 20
        h.nova(t, updated_at=5000.0 + t)
        h.silent(t + 1, last_beat_at=t)
        assert h.beating(t + 2) is S.ACTIVE
    assert h.rec.losses == ()
    h.silent(t + 10, last_beat_at=t + 9)     # the host really dies
    h.nova(t + 30, updated_at=5000.0 + t, ok=False)
    assert h.tick(t + 31) is S.FENCING


def test_the_grace_period_runs_from_the_last_beat():
    h = Host(machine.Policy(grace_period=10, nova_report_interval=2,
                            nova_seen_lag=3))
    h.beating(0)
    h.nova(1, updated_at=5000.0)
    h.silent(8, last_beat_at=5)              # beats stopped after 5
    assert h.rec.lost_at == 5
    h.nova(14.5, updated_at=5000.0)          # owed at 4, none recorded
    assert h.tick(14.9) is S.SUSPECT         # grace ends at 15
    assert h.tick(15) is S.FENCING


def test_nova_back_after_the_veto_says_what_held_the_host():
    """compute-death drill (issue 35, part 8): nova-compute back after
    the grace period, the host held by its agent meanwhile; the reason
    says so, not "within the grace period"."""
    h = Host()
    h.beating(0, compute=False)
    assert h.nova(40, updated_at=5000.0, ok=False) is S.SUSPECT
    h.tick(47)                              # 7 s later, grace 1 s
    assert h.nova(47.5, updated_at=5047.0) is S.ACTIVE
    assert "within the grace period" not in h.rec.reason
    assert h.rec.reason == (
        "heartbeat back: nova-compute reports again (after the grace "
        "period; its agent's beats held the host alive, never fenced)")


def test_nova_back_within_the_grace_period_says_so():
    h = Host(machine.Policy(grace_period=10, nova_report_interval=10,
                            nova_seen_lag=3))
    h.nova(40, updated_at=5000.0, ok=False)
    assert h.nova(45, updated_at=5044.0) is S.ACTIVE
    assert h.rec.reason == "heartbeat back within the grace period"
