"""Child processes with a log file each, and small waiting helpers."""

import os
import signal
import socket
import subprocess
import time

from functional.peers.errors import PeerError


def free_port(kind=socket.SOCK_STREAM):
    with socket.socket(socket.AF_INET, kind) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def port_open(port, host="127.0.0.1"):
    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex((host, port)) == 0


class Proc:
    """One peer process in a session of its own (so its workers die with it)."""

    def __init__(self, name, argv, log, env=None, cwd=None):
        self.name = name
        self.argv = [str(a) for a in argv]
        self.log = str(log)
        self.env = env
        self.cwd = cwd
        self.popen = None

    def start(self):
        if self.running():
            return self
        logf = open(self.log, "ab")
        logf.write(("\n==== %s start %s\n" % (time.strftime("%H:%M:%S"),
                                            " ".join(self.argv))).encode())
        logf.flush()
        try:
            self.popen = subprocess.Popen(
                self.argv, stdout=logf, stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL, env=self.env, cwd=self.cwd,
                start_new_session=True)
        except OSError as e:
            raise PeerError(self.name, "cannot start %s: %s"
                            % (self.argv[0], e), self.log)
        finally:
            logf.close()
        return self

    @property
    def pid(self):
        return self.popen.pid if self.popen else None

    def running(self):
        return self.popen is not None and self.popen.poll() is None

    def check(self):
        """Raise PeerError if the process has exited."""
        if self.popen is not None and self.popen.poll() is not None:
            raise PeerError(self.name, "exited with status %s"
                            % self.popen.returncode, self.log)

    def kill(self, sig=signal.SIGKILL):
        """Signal the whole process group and reap the leader."""
        if self.popen is None:
            return
        try:
            os.killpg(self.popen.pid, sig)
        except ProcessLookupError:
            pass
        try:
            self.popen.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(self.popen.pid, signal.SIGKILL)
            self.popen.wait(timeout=10)

    def stop(self):
        if self.popen is None:
            return
        if self.popen.poll() is None:
            try:
                os.killpg(self.popen.pid, signal.SIGTERM)
                self.popen.wait(timeout=5)
            except ProcessLookupError:
                pass
            except subprocess.TimeoutExpired:
                pass
        # workers of a stopped leader may linger: always finish the group
        try:
            os.killpg(self.popen.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        try:
            self.popen.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass


def pid_alive(pid):
    """Whether process ``pid`` runs: a zombie (exited, waiting for its
    parent to reap it) counts as gone."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        with open("/proc/%d/stat" % pid) as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


class StartedOnEnter:
    """``with Peer(...) as p``: start() on entry (stop() if it fails
    half-way), stop() on exit."""

    def __enter__(self):
        try:
            return self.start()
        except BaseException:
            self.stop()
            raise

    def __exit__(self, *exc):
        self.stop()


class Final(Exception):
    """Raised by a ``wait_until`` predicate that saw an end no waiting can
    change (a server in ERROR): ``error`` is raised at once, not after
    the timeout."""

    def __init__(self, error):
        super().__init__(str(error))
        self.error = error


def wait_until(predicate, timeout, what, peer, log=None, interval=0.25,
               procs=()):
    """Poll ``predicate`` until truthy; fail naming ``peer`` and ``log``.

    ``procs`` are checked on every round so a crashed peer fails at once
    instead of at the timeout; a predicate raising :class:`Final` too.
    """
    deadline = time.monotonic() + timeout
    last_exc = None
    while True:
        for p in procs:
            p.check()
        try:
            value = predicate()
            if value:
                return value
        except Final as f:
            raise f.error
        except Exception as e:  # noqa: BLE001 - reported at the timeout
            last_exc = e
        if time.monotonic() > deadline:
            detail = " (last error: %r)" % last_exc if last_exc else ""
            raise PeerError(peer, "not %s after %.0f s%s"
                            % (what, timeout, detail), log)
        time.sleep(interval)


def run(name, argv, log, env=None, timeout=300, input=None):
    """Run a one-shot command, appending its output to ``log``."""
    with open(log, "ab") as logf:
        logf.write(("\n==== %s %s\n" % (time.strftime("%H:%M:%S"),
                                        " ".join(map(str, argv)))).encode())
        logf.flush()
        try:
            res = subprocess.run([str(a) for a in argv], stdout=logf,
                                 stderr=subprocess.STDOUT, env=env,
                                 timeout=timeout, input=input)
        except (OSError, subprocess.TimeoutExpired) as e:
            raise PeerError(name, "%s failed: %s" % (argv[0], e), log)
    if res.returncode != 0:
        raise PeerError(name, "%s exited with status %d"
                        % (" ".join(map(str, argv[:3])), res.returncode), log)
