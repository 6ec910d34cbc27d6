"""IPMI fencing through ``ipmitool`` over RMCP+ (``-I lanplus``).

This is the only module that runs ipmitool. The BMC password reaches the
child through the environment (``-E`` reads ``IPMI_PASSWORD``); it is never
an argument, so it cannot show up in ``ps`` or in an error message.

``power_off``:

1. read ``chassis power status``; a host already Off is done;
2. send ``chassis power off``; a BMC that answers with an error refuses, and
   fencing fails at once; a BMC that cannot be reached is retried up to
   ``[fencing] retries`` times;
3. read the status every ``[fencing] poll_interval`` seconds until Off, for
   at most ``[fencing] timeout`` seconds.

Inventory options (besides ``address``, ``username``, ``password``):
``port`` (623), ``cipher_suite`` (3: ipmi_sim and many BMCs do not answer
the cipher-suite query, which makes every call wait ~10 s), ``interface``
(``lanplus``), ``timeout`` (seconds for one ipmitool run, 20).
"""

import dataclasses
import enum
import os
import re
import subprocess
import time

import structlog
import tenacity

from instanceha.drivers.fencing import base

LOG = structlog.get_logger("instanceha.fencing.ipmi")

DEFAULT_PORT = 623
DEFAULT_CIPHER_SUITE = 3
DEFAULT_INTERFACE = "lanplus"
DEFAULT_CALL_TIMEOUT = 20.0
#: variables ipmitool's -E reads; IPMITOOL_PASSWORD wins over IPMI_PASSWORD,
#: so a stray one inherited from our own environment is removed
PASSWORD_VARS = ("IPMITOOL_PASSWORD", "IPMI_PASSWORD")

_STATUS = re.compile(r"^Chassis Power is (on|off)$")
_CONTROL = re.compile(r"^Chassis Power Control: (Up/On|Down/Off)$")
#: ipmitool's words for "no session with the BMC" (as opposed to the BMC
#: answering with an error): these are retried
_UNREACHABLE = ("unable to establish", "no response", "insufficient resources for session",
                "timeout", "error: unable to", "get session challenge")


class Outcome(enum.Enum):
    OK = "ok"
    UNREACHABLE = "unreachable"   # no session: worth retrying
    REFUSED = "refused"           # the BMC answered, and said no


@dataclasses.dataclass(frozen=True)
class Result:
    """One ipmitool run, classified. ``detail`` is safe to log."""
    outcome: Outcome
    stdout: str = ""
    detail: str = ""


class _Unreachable(Exception):
    pass


def run_ipmitool(argv, env, timeout):
    """Default runner: (returncode, stdout, stderr); timeout -> rc None."""
    try:
        res = subprocess.run(argv, env=env, capture_output=True, timeout=timeout,
                             stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        return None, "", "timeout after %.0f s" % timeout
    except OSError as e:
        return 127, "", "cannot run %s: %s" % (argv[0], e.strerror)
    return (res.returncode, res.stdout.decode("utf-8", "replace"),
            res.stderr.decode("utf-8", "replace"))


def parse_status(stdout):
    """'Chassis Power is on|off' -> PowerState; anything else -> None."""
    for line in stdout.splitlines():
        m = _STATUS.match(line.strip())
        if m:
            return base.PowerState(m.group(1))
    return None


def parse_control(stdout):
    """'Chassis Power Control: Down/Off' -> PowerState asked for, else None."""
    for line in stdout.splitlines():
        m = _CONTROL.match(line.strip())
        if m:
            return base.PowerState.ON if m.group(1) == "Up/On" else base.PowerState.OFF
    return None


class IPMIDriver(base.FencingDriver):
    name = "ipmi"

    def __init__(self, conf, runner=run_ipmitool, sleep=time.sleep,
                 clock=time.monotonic, executable="ipmitool"):
        self._timeout = float(conf.fencing.timeout)
        self._poll_interval = float(conf.fencing.poll_interval)
        self._attempts = int(conf.fencing.retries)
        self._runner = runner
        self._sleep = sleep
        self._clock = clock
        self._exe = executable

    # ------------------------------------------------------------ command
    def argv(self, bmc, *command):
        """The ipmitool command line for ``bmc``: no secret in it."""
        opts = bmc.options
        return [self._exe,
                "-I", str(opts.get("interface", DEFAULT_INTERFACE)),
                "-H", bmc.address,
                "-p", str(int(opts.get("port", DEFAULT_PORT))),
                "-U", bmc.username,
                "-C", str(int(opts.get("cipher_suite", DEFAULT_CIPHER_SUITE))),
                "-E",
                "-N", "1", "-R", "2"] + list(command)

    def _env(self, bmc):
        env = {k: v for k, v in os.environ.items() if k not in PASSWORD_VARS}
        env["IPMI_PASSWORD"] = bmc.password
        return env

    def _call(self, bmc, *command):
        timeout = float(bmc.options.get("timeout", DEFAULT_CALL_TIMEOUT))
        rc, out, err = self._runner(self.argv(bmc, *command), self._env(bmc), timeout)
        detail = _scrub(err.strip() or out.strip(), bmc.password)
        if rc == 0:
            return Result(Outcome.OK, out, detail)
        low = detail.lower()
        if rc is None or rc == 127 or any(w in low for w in _UNREACHABLE):
            return Result(Outcome.UNREACHABLE, out, detail or "no answer")
        return Result(Outcome.REFUSED, out, detail or "exit status %s" % rc)

    def _call_retrying(self, bmc, what, *command):
        """Run ipmitool, retrying only when the BMC could not be reached."""
        def attempt():
            res = self._call(bmc, *command)
            if res.outcome is Outcome.UNREACHABLE:
                raise _Unreachable(res.detail)
            return res

        retrying = tenacity.Retrying(
            retry=tenacity.retry_if_exception_type(_Unreachable),
            stop=tenacity.stop_after_attempt(self._attempts),
            wait=tenacity.wait_fixed(self._poll_interval),
            sleep=self._sleep, reraise=True)
        try:
            res = retrying(attempt)
        except _Unreachable as e:
            raise base.FenceError("%s: BMC %s unreachable during %s after %d "
                                  "attempt(s): %s" % (bmc.host, bmc.address, what,
                                                      self._attempts, e))
        if res.outcome is Outcome.REFUSED:
            raise base.FenceError("%s: BMC %s refused %s: %s"
                                  % (bmc.host, bmc.address, what, res.detail))
        return res

    # ------------------------------------------------------------ interface
    def power_state(self, bmc):
        res = self._call_retrying(bmc, "power status", "chassis", "power", "status")
        state = parse_status(res.stdout)
        if state is None:
            raise base.FenceError("%s: BMC %s gave an unrecognised power status: %r"
                                  % (bmc.host, bmc.address, res.stdout.strip()[:120]))
        return state

    def power_off(self, bmc):
        if self.power_state(bmc) is base.PowerState.OFF:
            LOG.info("fence_already_off", host=bmc.host, driver=self.name)
            return
        res = self._call_retrying(bmc, "power off", "chassis", "power", "off")
        if parse_control(res.stdout) is not base.PowerState.OFF:
            raise base.FenceError("%s: BMC %s gave an unrecognised answer to power "
                                  "off: %r" % (bmc.host, bmc.address,
                                               res.stdout.strip()[:120]))
        self._wait_off(bmc)
        LOG.info("fence_power_off_confirmed", host=bmc.host, driver=self.name)

    def _wait_off(self, bmc):
        start = self._clock()

        def timed_out(retry_state):
            return self._clock() - start >= self._timeout

        retrying = tenacity.Retrying(
            retry=tenacity.retry_if_result(lambda s: s is not base.PowerState.OFF),
            stop=timed_out,
            wait=tenacity.wait_fixed(self._poll_interval),
            sleep=self._sleep)
        try:
            retrying(self.power_state, bmc)
        except tenacity.RetryError as e:
            last = e.last_attempt.result()
            raise base.FenceError("%s: BMC %s still reports power %s %.0f s after "
                                  "power off" % (bmc.host, bmc.address,
                                                 last.value, self._timeout))

    def power_on(self, bmc):
        res = self._call_retrying(bmc, "power on", "chassis", "power", "on")
        if parse_control(res.stdout) is not base.PowerState.ON:
            raise base.FenceError("%s: BMC %s gave an unrecognised answer to power "
                                  "on: %r" % (bmc.host, bmc.address,
                                              res.stdout.strip()[:120]))


def _scrub(text, secret):
    if secret:
        text = text.replace(secret, "***")
    return text[:300]
