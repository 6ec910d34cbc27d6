"""Fencing through a ClusterLabs fence agent (``fence_ipmilan``,
``fence_redfish``, ``fence_idrac``, ``fence_ilo*``, ``fence_kubevirt``...).

This is the only module that runs fence agents. A site that already fences
with Pacemaker reuses its stonith parameters: the inventory names the agent
and passes its parameters through (``doc/fence_agent.md`` translates a
``pcs stonith create`` line)::

    compute-0:
      driver: fence_agent
      agent: fence_ipmilan        # a fence_* executable
      address: 10.0.0.5           # sent as ip= unless params give ip
      username: admin             # sent as username=
      password: secret            # sent as password=, on stdin only
      params: {lanplus: 1, ipport: 6230, cipher: 3}
      agent_timeout: 60           # optional, seconds for one agent run

Protocol (the agents' own, ``/usr/share/fence/fencing.py``): the agent runs
with no argument at all and reads ``name=value`` lines on stdin, so no
parameter, and no secret, is ever on a command line. Names are the agents'
option names (``ip``, ``ipport``, ``plug``, ``ssl_insecure``, ``lanplus``,
``method``, ``power_timeout``...; ``-`` and ``_`` are the same). The agent
strips a line's trailing blanks and one pair of double quotes around a
value, so every value is sent inside double quotes: it then reaches the
agent exactly as written. A line break in a value would start another
parameter, so any line break in any field is refused.

Exit status, as the agents document it: ``action=status`` exits 0 when the
power is on and 2 (printing ``Status: OFF``) when it is off, 1 on error;
``action=off`` and ``action=on`` exit 0 on success (``Success: Already OFF``
included), 1 on error.

``power_off``:

1. ``action=status``; a host already Off is done (no ``off`` is sent);
2. ``action=off``; a failure is a FenceError (the agent itself waits for
   the power to go off, up to its ``power_timeout`` parameter, 20 s by
   default, and fails with "Timed out waiting to power OFF" when the BMC
   did not comply);
3. ``action=status`` every ``[fencing] poll_interval`` seconds until Off,
   for at most ``[fencing] timeout`` seconds. Off is exit status 2 *and*
   ``Status: OFF`` in the output: anything less proves nothing.

A run whose error says the device could not be reached (connection
refused, timed out, lost, "Unable to connect/login") is retried up to
``[fencing] retries`` times; other errors fail at once. A run that does not
finish within ``agent_timeout`` seconds (default ``[fencing] timeout``) is
killed, with its children, and is a FenceError.

The fields an entry may hold are described in
:mod:`instanceha.drivers.fencing.fence_agent_options`; running an agent and
reading its answer is :mod:`instanceha.drivers.fencing.fence_agent_run`.
"""

import os
import time

import structlog

from instanceha.drivers.fencing import base, fence_agent_run
from instanceha.drivers.fencing.fence_agent_options import (
    DEFAULT_SEARCH_PATH, FenceAgentOptions)
from instanceha.drivers.fencing.fence_agent_run import (
    Outcome, Result, parse_status, run_agent, scrub, secret_forms)
# Re-exported: tests, benchmarks and the functional bed look agents up here.
from instanceha.drivers.fencing.fence_agent_options import (  # noqa: F401
    find_agent)

LOG = structlog.get_logger("instanceha.fencing.fence_agent")

_IP_NAMES = ("ip", "ipaddr")
#: the agent reached the device and it did not comply: never retried
_REFUSED = ("timed out waiting to power",)
#: the agent could not reach or log in to the device: retried
_UNREACHABLE = ("unable to connect", "connection timed out",
                "connection lost", "connection refused", "timed out",
                "failed to establish a new connection", "no route to host",
                "network is unreachable", "name or service not known",
                "temporary failure in name resolution")


class _Unreachable(Exception):
    pass


class FenceAgentDriver(FenceAgentOptions, base.FencingDriver):
    name = "fence_agent"

    def __init__(self, conf, runner=run_agent, sleep=time.sleep,
                 clock=time.monotonic, search_path=DEFAULT_SEARCH_PATH,
                 path_env=None):
        self._timeout = float(conf.fencing.timeout)
        self._poll_interval = float(conf.fencing.poll_interval)
        self._attempts = int(conf.fencing.retries)
        self._runner = runner
        self._sleep = sleep
        self._clock = clock
        self._search_path = tuple(search_path)
        self._path_env = path_env    # None: $PATH at each look-up

    # ------------------------------------------------------------ protocol
    def stdin(self, bmc, settings, action):
        """The agent's input for ``action``: name="value" lines. Holds the
        password: never log it."""
        lines = [("action", action)]
        names = {k.replace("-", "_") for k, _ in settings.params}
        if bmc.address and not names.intersection(_IP_NAMES):
            lines.append(("ip", bmc.address))
        if bmc.username:
            lines.append(("username", bmc.username))
        if bmc.password:
            lines.append(("password", bmc.password))
        lines.extend(settings.params)
        return "".join('%s="%s"\n' % kv for kv in lines)

    def _env(self):
        env = dict(os.environ)
        # Under Pacemaker this disables the agents' own timeouts.
        env.pop("PCMK_service", None)
        env.update(LANG="C", LC_ALL="C", PYTHONWARNINGS="ignore")
        return env

    def _run(self, bmc, settings, action):
        rc, out, err = self._runner([settings.path],
                                    self.stdin(bmc, settings, action),
                                    self._env(), settings.agent_timeout)
        # Scrubbed before anything is cut short, so no part of it survives.
        secrets = secret_forms(bmc)
        out, err = scrub(out, secrets), scrub(err, secrets)
        detail = fence_agent_run.detail(out, err)
        if rc is None:
            return Result(Outcome.TIMEOUT, rc, out, detail)
        if rc == 127 and not out:
            return Result(Outcome.CANNOT_RUN, rc, out, detail)
        if action == "status" and rc in (0, 2):
            return Result(Outcome.OK, rc, out, detail)
        if rc == 0:
            return Result(Outcome.OK, rc, out, detail)
        low = detail.lower()
        if not any(w in low for w in _REFUSED) \
                and any(w in low for w in _UNREACHABLE):
            return Result(Outcome.UNREACHABLE, rc, out, detail)
        return Result(Outcome.FAILED, rc, out,
                      detail or "exit status %s, no message" % rc)

    def _where(self, bmc, settings):
        return "fence agent %s%s" % (settings.agent, " (BMC %s)" % bmc.address
                                     if bmc.address else "")

    def _call(self, bmc, settings, action, what):
        """Run the agent, retrying only when it could not reach the device;
        every other failure is a FenceError."""
        def attempt():
            res = self._run(bmc, settings, action)
            if res.outcome is Outcome.UNREACHABLE:
                raise _Unreachable(res.detail)
            return res

        where = self._where(bmc, settings)
        try:
            res = base.retrying(attempt, _Unreachable, self._attempts,
                                self._poll_interval, self._sleep, dict(
                                    log=LOG, host=bmc.host, driver=self.name,
                                    agent=settings.agent, action=what))
        except _Unreachable as e:
            LOG.error("fence_error", host=bmc.host, driver=self.name,
                      agent=settings.agent, action=what, reason="unreachable")
            raise base.BmcUnreachable("%s: %s could not reach the device during %s"
                                  " after %d attempt(s): %s"
                                  % (bmc.host, where, what, self._attempts, e))
        if res.outcome is Outcome.TIMEOUT:
            LOG.error("fence_error", host=bmc.host, driver=self.name,
                      agent=settings.agent, action=what, reason="agent timeout",
                      timeout=settings.agent_timeout)
            raise base.FenceError("%s: %s did not finish %s within %g s "
                                  "(agent_timeout); killed"
                                  % (bmc.host, where, what,
                                     settings.agent_timeout))
        if res.outcome is Outcome.CANNOT_RUN:
            LOG.error("fence_error", host=bmc.host, driver=self.name,
                      agent=settings.agent, action=what, reason="cannot run")
            raise base.FenceError("%s: %s: %s" % (bmc.host, where, res.detail))
        if res.outcome is Outcome.FAILED:
            LOG.error("fence_error", host=bmc.host, driver=self.name,
                      agent=settings.agent, action=what, reason="failed",
                      returncode=res.returncode)
            raise base.FenceError("%s: %s failed %s (exit status %s): %s"
                                  % (bmc.host, where, what, res.returncode,
                                     res.detail))
        return res

    # ------------------------------------------------------------ interface
    def power_state(self, bmc, settings=None):
        settings = settings or self.settings(bmc)
        res = self._call(bmc, settings, "status", "power status")
        state = parse_status(res.returncode, res.stdout)
        if state is None:
            raise base.FenceError(
                "%s: %s gave an answer to status that the agents do not "
                "document (exit status %s, output %r): not proven off"
                % (bmc.host, self._where(bmc, settings), res.returncode,
                   res.stdout.strip()[:120]))
        return state

    def power_off(self, bmc):
        settings = self.settings(bmc)
        if self.power_state(bmc, settings) is base.PowerState.OFF:
            LOG.info("fence_already_off", host=bmc.host, driver=self.name,
                     agent=settings.agent)
            return
        self._call(bmc, settings, "off", "power off")
        LOG.info("fence_off_sent", host=bmc.host, driver=self.name,
                 agent=settings.agent)
        self._wait_off(bmc, settings)
        LOG.info("fence_power_off_confirmed", host=bmc.host, driver=self.name,
                 agent=settings.agent)

    def _wait_off(self, bmc, settings):
        last = base.wait_until_off(lambda: self.power_state(bmc, settings),
                                   self._timeout, self._poll_interval,
                                   self._sleep, self._clock)
        if last is not None:
            LOG.error("fence_timeout", host=bmc.host, driver=self.name,
                      agent=settings.agent, timeout=self._timeout,
                      state=last.value)
            raise base.FenceError("%s: %s still reports power %s %.0f s after "
                                  "power off" % (bmc.host,
                                                 self._where(bmc, settings),
                                                 last.value, self._timeout))

    def power_on(self, bmc):
        settings = self.settings(bmc)
        self._call(bmc, settings, "on", "power on")
        LOG.info("power_on_sent", host=bmc.host, driver=self.name,
                 agent=settings.agent)
