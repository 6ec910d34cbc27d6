"""IPMI fencing through ``ipmitool`` over RMCP+ (``-I lanplus``).

This is the only module that runs ipmitool. The BMC password is never an
argument, so it cannot show up in ``ps`` or in an error message: it reaches
the child through the environment (``-E`` reads ``IPMI_PASSWORD``; the
default) or, with ``password_via: file``, through a file only our user can
read (``-f``; created 0600 for one ipmitool run and removed after it).

``power_off``:

1. read ``chassis power status``; a host already Off is done;
2. send ``chassis power off``; a BMC that answers with an error refuses, and
   fencing fails at once; a BMC that cannot be reached is retried up to
   ``[fencing] retries`` times; a BMC that rejects the user or password
   (RAKP) fails at once, saying the credentials were refused;
3. read the status every ``[fencing] poll_interval`` seconds until Off, for
   at most ``[fencing] timeout`` seconds.

Inventory options (besides ``address``, ``username``, ``password``):
``port`` (623), ``cipher_suite`` (3: ipmi_sim and many BMCs do not answer
the cipher-suite query, which makes every call wait ~10 s), ``interface``
(``lanplus``), ``timeout`` (seconds for one ipmitool run, 20),
``password_via`` (``env`` or ``file``).

ipmitool runs with ``-v``: without it, a wrong password and a BMC that does
not answer print the same line ("Unable to establish IPMI v2 / RMCP+
session"); with it, the RAKP error that names the refusal comes first.
"""

import dataclasses
import enum
import os
import re
import subprocess
import tempfile
import time

import structlog

from instanceha.drivers.fencing import base
from instanceha.drivers.fencing import health as health_mod
from instanceha.log import mask_known

LOG = structlog.get_logger("instanceha.fencing.ipmi")

DEFAULT_PORT = 623
DEFAULT_CIPHER_SUITE = 3
DEFAULT_INTERFACE = "lanplus"
DEFAULT_CALL_TIMEOUT = 20.0
PASSWORD_VIA = ("env", "file")
#: variables ipmitool's -E reads; IPMITOOL_PASSWORD wins over IPMI_PASSWORD,
#: so a stray one inherited from our own environment is removed
PASSWORD_VARS = ("IPMITOOL_PASSWORD", "IPMI_PASSWORD")

_STATUS = re.compile(r"^Chassis Power is (on|off)$")
_CONTROL = re.compile(r"^Chassis Power Control: (Up/On|Down/Off)$")
#: ipmitool's words (with -v) for a BMC that refused the user or password
#: during session setup; checked before _UNREACHABLE, never retried
_CREDENTIALS = ("rakp 2 hmac is invalid", "unauthorized name",
                "invalid integrity check value", "unauthorized role",
                "invalid role", "invalid user name", "bad password")
#: the BMC and we share no cipher suite: a configuration error
_CIPHER = ("invalid authentication algorithm", "invalid integrity algorithm",
           "invalid confidentiality algorithm", "no cipher suite match")
#: what -v adds to a normal run; left out of error details
_NOISE = ("loading iana pen registry", "running get vso capabilities",
          "invalid completion code received: invalid command",
          "discovered ipmb address")
#: ipmitool's words for "no session with the BMC" (as opposed to the BMC
#: answering with an error): these are retried
_UNREACHABLE = ("unable to establish", "no response", "insufficient resources for session",
                "timeout", "error: unable to", "get session challenge")


class Outcome(enum.Enum):
    OK = "ok"
    UNREACHABLE = "unreachable"   # no session: worth retrying
    REFUSED = "refused"           # the BMC answered, and said no
    CREDENTIALS = "credentials"   # the BMC refused the user or password


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
                 clock=time.monotonic, executable="ipmitool", tmpdir=None):
        self._timeout = float(conf.fencing.timeout)
        self._poll_interval = float(conf.fencing.poll_interval)
        self._attempts = int(conf.fencing.retries)
        self._runner = runner
        self._sleep = sleep
        self._clock = clock
        self._exe = executable
        self._tmpdir = tmpdir     # for password files; None: tempfile's

    # ------------------------------------------------------------ command
    def argv(self, bmc, *command, password_file=None):
        """The ipmitool command line for ``bmc``: no secret in it. With
        ``password_file`` ipmitool reads the password from that file (-f),
        else from its environment (-E)."""
        opts = bmc.options
        password = ["-f", password_file] if password_file else ["-E"]
        return [self._exe,
                "-I", str(opts.get("interface", DEFAULT_INTERFACE)),
                "-H", bmc.address,
                "-p", str(int(opts.get("port", DEFAULT_PORT))),
                "-U", bmc.username,
                "-C", str(int(opts.get("cipher_suite", DEFAULT_CIPHER_SUITE)))
                ] + password + ["-v", "-N", "1", "-R", "2"] + list(command)

    def _env(self, bmc, via="env"):
        env = {k: v for k, v in os.environ.items() if k not in PASSWORD_VARS}
        if via == "env":
            env["IPMI_PASSWORD"] = bmc.password
        return env

    def password_via(self, bmc):
        """The host's ``password_via`` option, validated."""
        via = str(bmc.options.get("password_via", "env")).strip().lower()
        if via not in PASSWORD_VIA:
            raise base.FenceError("%s: option password_via: %r is not one of "
                                  "%s" % (bmc.host, bmc.options.get("password_via"),
                                          ", ".join(PASSWORD_VIA)))
        return via

    def _write_password_file(self, bmc):
        """A new file holding only the password, readable by our user only
        (mkstemp creates it 0600). The caller removes it."""
        try:
            fd, path = tempfile.mkstemp(prefix="instanceha-ipmi-",
                                        dir=self._tmpdir)
        except OSError as e:
            raise base.FenceError("%s: cannot create a password file for "
                                  "ipmitool: %s" % (bmc.host, e.strerror))
        try:
            os.fchmod(fd, 0o600)
            os.write(fd, bmc.password.encode())
        except OSError as e:
            os.close(fd)
            _remove(path)
            raise base.FenceError("%s: cannot write the password file for "
                                  "ipmitool: %s" % (bmc.host, e.strerror))
        os.close(fd)
        return path

    def _call(self, bmc, *command):
        via = self.password_via(bmc)
        timeout = float(bmc.options.get("timeout", DEFAULT_CALL_TIMEOUT))
        path = self._write_password_file(bmc) if via == "file" else None
        try:
            rc, out, err = self._runner(self.argv(bmc, *command, password_file=path),
                                        self._env(bmc, via), timeout)
        finally:
            if path is not None:
                _remove(path)
        detail = _scrub(_without_noise(err) or out.strip(), bmc.password)
        if rc == 0:
            return Result(Outcome.OK, out, detail)
        low = detail.lower()
        if any(w in low for w in _CREDENTIALS):
            return Result(Outcome.CREDENTIALS, out, detail)
        if any(w in low for w in _CIPHER):
            return Result(Outcome.REFUSED, out, "%s (option cipher_suite %s)"
                          % (detail, bmc.options.get("cipher_suite",
                                                     DEFAULT_CIPHER_SUITE)))
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

        try:
            res = base.retrying(attempt, _Unreachable, self._attempts,
                                self._poll_interval, self._sleep, dict(
                                    log=LOG, host=bmc.host, driver=self.name,
                                    action=what))
        except _Unreachable as e:
            LOG.error("fence_error", host=bmc.host, driver=self.name,
                      action=what, reason="unreachable")
            raise base.BmcUnreachable("%s: BMC %s unreachable during %s after %d "
                                  "attempt(s): %s" % (bmc.host, bmc.address, what,
                                                      self._attempts, e))
        if res.outcome is Outcome.CREDENTIALS:
            LOG.error("fence_error", host=bmc.host, driver=self.name,
                      action=what, reason="credentials refused")
            raise base.FenceError("%s: BMC %s refused the credentials of user %s "
                                  "during %s: %s" % (bmc.host, bmc.address,
                                                     bmc.username, what,
                                                     res.detail))
        if res.outcome is Outcome.REFUSED:
            LOG.error("fence_error", host=bmc.host, driver=self.name,
                      action=what, reason="refused")
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

    def system_identity(self, bmc):
        """Get System GUID (IPMI App netfn 0x06, command 0x37)."""
        res = self._call_retrying(bmc, "get system guid", "raw", "0x06",
                                  "0x37")
        try:
            raw = bytes(int(b, 16) for b in res.stdout.split())
        except ValueError:
            return None
        forms = base.uuid_forms(raw)
        return {"uuids": forms} if forms else None

    def health(self, bmc):
        """Sensor state (``sdr elist``: a sensor at a non-critical
        threshold is Warning, at a critical or non-recoverable one
        Critical) and the faults the event log asserted and did not
        deassert since (``sel elist``: Warning only, a SEL keeps
        history). None when the BMC lists neither a sensor nor an event.
        One of the two refused is logged and the other judged; both
        refused, or the BMC unreachable, raise FenceError."""
        out, errors = [], []
        for what, command in (("sensor list", ("sdr", "elist")),
                              ("event log", ("sel", "elist"))):
            try:
                out.append(self._call_retrying(bmc, what, *command).stdout)
            except base.BmcUnreachable:
                raise
            except base.FenceError as e:
                LOG.info("ipmi_health_part_unread", host=bmc.host,
                         part=what, reason=str(e))
                errors.append(e)
                out.append(None)
        if len(errors) == 2:
            raise errors[0]
        return health_mod.ipmi_health(out[0], out[1])

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
        last = base.wait_until_off(lambda: self.power_state(bmc),
                                   self._timeout, self._poll_interval,
                                   self._sleep, self._clock)
        if last is not None:
            LOG.error("fence_timeout", host=bmc.host, driver=self.name,
                      timeout=self._timeout, state=last.value)
            raise base.FenceError("%s: BMC %s still reports power %s %.0f s after "
                                  "power off" % (bmc.host, bmc.address,
                                                 last.value, self._timeout))

    def power_on(self, bmc):
        res = self._call_retrying(bmc, "power on", "chassis", "power", "on")
        if parse_control(res.stdout) is not base.PowerState.ON:
            raise base.FenceError("%s: BMC %s gave an unrecognised answer to power "
                                  "on: %r" % (bmc.host, bmc.address,
                                              res.stdout.strip()[:120]))


def _remove(path):
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


def _without_noise(text):
    """ipmitool's stderr on one line, without the lines -v adds to every
    run."""
    return "; ".join(line.strip() for line in text.strip().splitlines()
                     if line.strip() and not line.strip().lower().startswith(_NOISE))


def _scrub(text, secret):
    return mask_known(text, [secret])[:300]
