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

Fields (besides ``address``, ``username``, ``password``):

``agent``
    the agent's name: ``fence_`` and letters, digits or ``_``, found as an
    executable in the search path (``/usr/sbin``, ``/usr/libexec/fence-
    agents``, ``/sbin``, ``/usr/local/sbin``, then ``$PATH``). Agents that
    power nothing off (``fence_kdump``, ``fence_compute``...) are refused.
``params``
    a mapping of agent parameter names to strings, numbers or booleans
    (true/false are sent as 1/0). ``action``, ``username``/``login`` and
    ``password``/``passwd`` are ours: use the fields.
``agent_timeout``
    seconds one agent run may take.

Every error is a FenceError naming the host (and the field, for a setting)
and never the password.
"""

import base64
import dataclasses
import enum
import os
import re
import signal
import subprocess
import time
import urllib.parse

import structlog

from instanceha.drivers.fencing import base

LOG = structlog.get_logger("instanceha.fencing.fence_agent")

#: where Debian (/usr/sbin), RHEL (/usr/sbin) and Debian's helper binaries
#: (/usr/libexec/fence-agents) keep the agents; $PATH is searched after
DEFAULT_SEARCH_PATH = ("/usr/sbin", "/usr/libexec/fence-agents", "/sbin",
                       "/usr/local/sbin")
_AGENT_NAME = re.compile(r"^fence_[A-Za-z0-9_]+$")
#: agents that never power anything off: they cannot prove a host dead
NOT_POWER_AGENTS = {
    "fence_kdump": "it waits for a kdump message and powers nothing off "
                   "(instanceha's [kdump] does that job)",
    "fence_kdump_send": "it is the kdump sender, not a fence agent",
    "fence_ack_manual": "it is a manual acknowledgement",
    "fence_heuristics_ping": "it is a heuristic, not a fence",
    "fence_compute": "it evacuates through Nova, which is instanceha's own "
                     "job, and powers nothing off",
    "fence_evacuate": "it evacuates through Nova, which is instanceha's own "
                      "job, and powers nothing off",
}
_PARAM_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]*$")
#: parameters the driver sets itself (names with - read as _)
_RESERVED = {
    "action": "the driver chooses the action",
    "username": "use the username field",
    "login": "use the username field",
    "password": "use the password field (kept out of logs)",
    "passwd": "use the password field (kept out of logs)",
}
_IP_NAMES = ("ip", "ipaddr")
#: characters that end a line for the agent (Python reads its stdin with
#: universal newlines) or for anything splitting lines; NUL for good measure
_BREAKS = frozenset("\n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029\x00")

_STATUS_LINE = re.compile(r"^\s*Status:\s*(ON|OFF)\s*$", re.I | re.M)
#: the fencing library's log prefix: "2024-01-01 10:00:00,123 ERROR: "
_LOG_PREFIX = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d+ "
                         r"(CRITICAL|ERROR|WARNING|INFO|DEBUG): ?")
#: lines that say nothing about this run
_NOISE = ("please use '-h' for usage", "deprecationwarning",
          "from pipes import", "insecurerequestwarning", "warnings.warn")
#: the agent reached the device and it did not comply: never retried
_REFUSED = ("timed out waiting to power",)
#: the agent could not reach or log in to the device: retried
_UNREACHABLE = ("unable to connect", "connection timed out",
                "connection lost", "connection refused", "timed out",
                "failed to establish a new connection", "no route to host",
                "network is unreachable", "name or service not known",
                "temporary failure in name resolution")


class Outcome(enum.Enum):
    OK = "ok"
    UNREACHABLE = "unreachable"   # could not reach the device: retried
    FAILED = "failed"             # the agent said no
    TIMEOUT = "timeout"           # the agent did not finish in time
    CANNOT_RUN = "cannot run"     # the agent could not be started


@dataclasses.dataclass(frozen=True)
class Result:
    """One agent run, classified. ``detail`` is safe to log."""
    outcome: Outcome
    returncode: object = None
    stdout: str = ""
    detail: str = ""


@dataclasses.dataclass(frozen=True)
class Settings:
    """A host's validated settings. Holds no secret."""
    agent: str
    path: str
    params: tuple          # ((name, value as sent), ...)
    agent_timeout: float


class _Unreachable(Exception):
    pass


def run_agent(argv, stdin, env, timeout):
    """Default runner: (returncode, stdout, stderr); timeout -> rc None.

    The agent runs in a session of its own, so that a timeout kills the
    programs it started (ipmitool, ssh) with it."""
    try:
        proc = subprocess.Popen(argv, stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                env=env, start_new_session=True)
    except OSError as e:
        return 127, "", "cannot run %s: %s" % (argv[0], e.strerror)
    try:
        out, err = proc.communicate(stdin.encode(), timeout=timeout)
    except subprocess.TimeoutExpired:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        try:
            proc.communicate(timeout=5)
        except subprocess.TimeoutExpired:
            # something that left the session still holds the pipes
            for f in (proc.stdin, proc.stdout, proc.stderr):
                if f is not None:
                    f.close()
            proc.wait()
        return None, "", "no answer within %g s" % timeout
    return (proc.returncode, out.decode("utf-8", "replace"),
            err.decode("utf-8", "replace"))


def find_agent(name, search_path, path_env=None):
    """The executable file ``name`` in ``search_path`` then $PATH, or None."""
    dirs = list(search_path)
    path_env = os.environ.get("PATH", "") if path_env is None else path_env
    dirs += [d for d in path_env.split(os.pathsep) if d]
    for d in dirs:
        candidate = os.path.join(d, name)
        if os.path.isfile(candidate) and os.access(candidate, os.X_OK):
            return candidate
    return None


def parse_status(returncode, stdout):
    """A status run's answer -> PowerState, or None when it is not one the
    agents document (exit 0: on; exit 2 with ``Status: OFF``: off)."""
    said = {m.upper() for m in _STATUS_LINE.findall(stdout)}
    if returncode == 0 and "OFF" not in said:
        return base.PowerState.ON
    if returncode == 2 and said == {"OFF"}:
        return base.PowerState.OFF
    return None


class FenceAgentDriver(base.FencingDriver):
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

    # ------------------------------------------------------------ settings
    def settings(self, bmc):
        """The host's validated settings; an invalid one is a FenceError
        naming the host and the field (never a secret's value)."""
        agent = bmc.options.get("agent")
        if not agent:
            raise self._field_error(bmc, "agent", "missing (the fence agent "
                                    "to run, e.g. fence_ipmilan)")
        if not isinstance(agent, str) or not _AGENT_NAME.match(agent):
            raise self._field_error(bmc, "agent", "%r is not a fence agent "
                                    "name (fence_ and letters, digits or _)"
                                    % (agent,))
        if agent in NOT_POWER_AGENTS:
            raise self._field_error(bmc, "agent", "%s cannot fence: %s"
                                    % (agent, NOT_POWER_AGENTS[agent]))
        for field in ("address", "username", "password"):
            if _has_break(getattr(bmc, field) or ""):
                raise self._field_error(bmc, field, "holds a line break or "
                                        "NUL (it would add agent parameters)")
        if "://" in (bmc.address or ""):
            raise self._field_error(bmc, "address", "%s is a URL; agents take"
                                    " a host name or IP address (ip=)"
                                    % bmc.address)
        params = self._params(bmc)
        timeout = self._timeout
        if bmc.options.get("agent_timeout") is not None:
            raw = bmc.options["agent_timeout"]
            try:
                timeout = -1 if isinstance(raw, bool) else float(raw)
            except (TypeError, ValueError):
                timeout = -1
            if not 0 < timeout < float("inf"):
                raise self._field_error(bmc, "agent_timeout", "%r is not a "
                                        "positive number of seconds" % (raw,))
        path = find_agent(agent, self._search_path, self._path_env)
        if path is None:
            LOG.error("fence_error", host=bmc.host, driver=self.name,
                      agent=agent, reason="agent not installed")
            raise base.FenceError(
                "%s: fence agent %s is not installed (looked in %s and $PATH;"
                " Debian and RHEL ship it in the fence-agents packages)"
                % (bmc.host, agent, ", ".join(self._search_path)))
        return Settings(agent=agent, path=path, params=params,
                        agent_timeout=timeout)

    def _params(self, bmc):
        raw = bmc.options.get("params")
        if raw is None:
            raw = {}
        if not isinstance(raw, dict):
            raise self._field_error(bmc, "params", "must be a mapping of "
                                    "agent parameter names to values")
        seen = {}
        params = []
        for key, value in raw.items():
            if not isinstance(key, str) or not _PARAM_NAME.match(key):
                raise self._field_error(bmc, "params", "%r is not an agent "
                                        "parameter name" % (key,))
            canonical = key.replace("-", "_")
            if canonical in _RESERVED:
                raise self._field_error(bmc, "params.%s" % key,
                                        _RESERVED[canonical])
            if canonical in seen:
                raise self._field_error(bmc, "params.%s" % key, "given twice"
                                        " (as %s too)" % seen[canonical])
            seen[canonical] = key
            if isinstance(value, bool):
                text = "1" if value else "0"
            elif isinstance(value, (int, float, str)):
                text = str(value)
            else:
                raise self._field_error(bmc, "params.%s" % key, "must be a "
                                        "string, number or boolean, not %s"
                                        % type(value).__name__)
            if _has_break(text):
                raise self._field_error(bmc, "params.%s" % key, "holds a line"
                                        " break or NUL (it would add agent "
                                        "parameters)")
            params.append((key, text))
        return tuple(params)

    def _field_error(self, bmc, field, reason):
        LOG.error("fence_error", host=bmc.host, driver=self.name,
                  field=field, reason=reason)
        return base.FenceError("%s: field %s: %s" % (bmc.host, field, reason))

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
        secrets = _secret_forms(bmc)
        out, err = _scrub(out, secrets), _scrub(err, secrets)
        detail = _detail(out, err)
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


def _has_break(text):
    return any(c in _BREAKS for c in text)


def _secret_forms(bmc):
    """The password as an agent might echo it: plain, URL-quoted, inside
    an HTTP basic-auth header."""
    if not bmc.password:
        return ()
    basic = base64.b64encode(("%s:%s" % (bmc.username, bmc.password))
                             .encode()).decode()
    return (bmc.password, urllib.parse.quote(bmc.password, safe=""), basic)


def _scrub(text, secrets):
    for secret in secrets:
        if secret:
            text = text.replace(secret, "***")
    return text


def _detail(stdout, stderr):
    """What the agent said about the failure, on one line: its ERROR log
    lines; else a traceback's last line; else its other stderr lines; else
    its output."""
    errors, others = [], []
    for line in stderr.splitlines():
        text = line.strip()
        if not text or any(n in text.lower() for n in _NOISE):
            continue
        m = _LOG_PREFIX.match(text)
        if m:
            text = text[m.end():].strip()
            if not text or any(n in text.lower() for n in _NOISE):
                continue
            (errors if m.group(1) in ("ERROR", "CRITICAL") else
             others).append(text)
        else:
            others.append(text)
    if errors:
        return "; ".join(errors)[:300]
    if "Traceback (most recent call last)" in stderr and others:
        return ("agent crashed: %s" % others[-1])[:300]
    if others:
        return "; ".join(others)[-300:]
    return stdout.strip().replace("\n", "; ")[:300]
