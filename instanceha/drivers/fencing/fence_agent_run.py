"""Running one fence agent and reading what it said.

:func:`run_agent` runs an agent in a session of its own (a timeout kills
what it started too); :func:`parse_status` reads a status run's answer;
:func:`detail` picks the words that say why a run failed; :func:`scrub`
and :func:`secret_forms` keep the password out of everything kept or
logged. :class:`Result` is one run, classified as an :class:`Outcome`.
"""

import base64
import dataclasses
import enum
import os
import re
import signal
import subprocess
import urllib.parse

from instanceha.drivers.fencing import base
from instanceha.log import mask_known

_STATUS_LINE = re.compile(r"^\s*Status:\s*(ON|OFF)\s*$", re.I | re.M)
#: the fencing library's log prefix: "2024-01-01 10:00:00,123 ERROR: "
_LOG_PREFIX = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d+ "
                         r"(CRITICAL|ERROR|WARNING|INFO|DEBUG): ?")
#: lines that say nothing about this run
_NOISE = ("please use '-h' for usage", "deprecationwarning",
          "from pipes import", "insecurerequestwarning", "warnings.warn")


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


def parse_status(returncode, stdout):
    """A status run's answer -> PowerState, or None when it is not one the
    agents document (exit 0: on; exit 2 with ``Status: OFF``: off)."""
    said = {m.upper() for m in _STATUS_LINE.findall(stdout)}
    if returncode == 0 and "OFF" not in said:
        return base.PowerState.ON
    if returncode == 2 and said == {"OFF"}:
        return base.PowerState.OFF
    return None


def secret_forms(bmc):
    """The password as an agent might echo it: plain, URL-quoted, inside
    an HTTP basic-auth header."""
    if not bmc.password:
        return ()
    basic = base64.b64encode(("%s:%s" % (bmc.username, bmc.password))
                             .encode()).decode()
    return (bmc.password, urllib.parse.quote(bmc.password, safe=""), basic)


def scrub(text, secrets):
    return mask_known(text, secrets)


def detail(stdout, stderr):
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
