"""The real ``instanceha run`` process, as the functional tests drive it.

One class for every suite (simulator, real peers, event sources): start the
engine on a config file, read what it says about itself (status file,
journal), wait for a host's state, stop it.
"""

import configparser
import contextlib
import json
import os
import subprocess
import sys
import time

from functional import waiting
from instanceha.journal import Journal


class EngineExited(AssertionError):
    pass


def armed_env(point=None):
    """This process's environment for an engine, with failpoint
    ``point`` armed (``INSTANCEHA_FAILPOINT``) or none."""
    from instanceha import failpoints
    env = {k: v for k, v in os.environ.items() if k != failpoints.ENV}
    if point:
        env[failpoints.ENV] = point
    return env


class EngineProcess:

    def __init__(self, workdir, conf_path, status_path, journal_url):
        self.workdir = str(workdir)
        self.conf_path = conf_path
        self.status_path = status_path
        self.journal_url = journal_url
        self.log_path = os.path.join(self.workdir, "instanceha.log")
        self.proc = None

    def command(self):
        """The engine's command line: ``instanceha run`` on this config."""
        return [sys.executable, "-m", "instanceha.cmd.main", "run",
                "--config-file", self.conf_path]

    def start(self, expected_hosts, timeout=60, env=None, wrapper=()):
        """``wrapper``: a command line the engine's is appended to (e.g.
        ``unshare -m ...`` to give it its own /etc/hosts)."""
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(
                list(wrapper) + self.command(),
                stdout=log, stderr=subprocess.STDOUT, env=env)
        # A status file left by an earlier run does not count.
        started = time.time()
        self.wait(lambda: self.status().get("generated_at", 0) >= started
                  and len(self.states()) >= expected_hosts, timeout,
                  "the engine to see every host")
        return self

    def run_to_exit(self, timeout=30):
        """``instanceha run`` expected to stop by itself (a refused
        start): (CompletedProcess with text stdout/stderr, seconds)."""
        started = time.monotonic()
        out = subprocess.run(self.command(), capture_output=True, text=True,
                             timeout=timeout)
        return out, time.monotonic() - started

    def stop(self):
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None

    def wait_exit(self, timeout):
        """Wait up to ``timeout`` s for the process to end by itself (a
        failpoint kills it); returns its return code (-9: SIGKILL) and
        forgets it, so start() can run it again. A timeout is an
        AssertionError, the process left running."""
        try:
            code = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            raise AssertionError(
                "timed out after %ss waiting for the engine to exit "
                "(states: %s; log: %s)" % (timeout, self.states(),
                                           self.log_path))
        self.proc = None
        return code

    def status(self):
        try:
            with open(self.status_path) as f:
                return json.load(f)
        except (OSError, ValueError):
            return {"hosts": []}

    def states(self):
        if self.proc is not None and self.proc.poll() is not None:
            raise EngineExited("engine exited with status %s; log %s:\n%s" % (
                self.proc.returncode, self.log_path, self.log_text()[-3000:]))
        return {h["name"]: (h["state"], h.get("reason") or "")
                for h in self.status().get("hosts", [])}

    def wait(self, predicate, timeout, what):
        return waiting.wait_for(predicate, timeout, lambda: "%s (states: %s; "
                                "log: %s)" % (what, self.states(),
                                              self.log_path))

    def wait_state(self, host, state, timeout=90):
        return self.wait(lambda: self.states().get(host, ("",))[0] == state
                         and self.states()[host], timeout,
                         "%s to be %s" % (host, state))

    def api_socket(self):
        """The engine's ``[api] unix_socket`` as its config file says."""
        parser = configparser.ConfigParser(interpolation=None)
        parser.read(self.conf_path)
        return parser.get("api", "unix_socket", fallback=None) or None

    def api(self, method, path, body=None, headers=None, timeout=10):
        """One request to the engine's operator API through its unix
        socket, as the CLI sends it: (status, headers, raw body)."""
        from instanceha.api.client import UnixConnection
        conn = UnixConnection(self.api_socket(), timeout)
        try:
            conn.request(method, path, body=body, headers=headers or {})
            resp = conn.getresponse()
            return resp.status, dict(resp.getheaders()), resp.read()
        finally:
            conn.close()

    def journal(self):
        return Journal(self.journal_url)

    @contextlib.contextmanager
    def reading_journal(self):
        """The journal, closed again on leaving the block."""
        j = self.journal()
        try:
            yield j
        finally:
            j.close()

    def log_text(self):
        try:
            with open(self.log_path, errors="replace") as f:
                return f.read()
        except OSError:
            return ""
