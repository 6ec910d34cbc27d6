"""Run the real ``instanceha run`` process against the real-peer test bed."""

import json
import os
import subprocess
import sys
import time

import yaml

from instanceha.journal import Journal
from functional.peers.errors import PeerError

#: Detection tuned to the test bed's Nova (report_interval 2 s,
#: service_down_time 8 s): a dead compute is fenced ~10 s after its death.
TIMINGS = {
    "detection": {"poll_interval": 1.0, "delta": 6.0, "grace_period": 2.0,
                  "tick_interval": 0.2},
    "fencing": {"timeout": 30.0, "poll_interval": 0.2, "retries": 2},
    "evacuation": {"poll_interval": 0.5, "cleanup_check_interval": 1.0,
                   "concurrency": 4, "retry_backoff": 2.0},
}


class Engine:

    def __init__(self, bed, workdir, overrides=None):
        self.bed = bed
        self.workdir = str(workdir)
        os.makedirs(self.workdir, exist_ok=True)
        self.log_path = os.path.join(self.workdir, "instanceha.log")
        self.status_path = os.path.join(self.workdir, "status.json")
        self.journal_url = "sqlite:///" + os.path.join(self.workdir, "journal.sqlite")
        self.conf_path = self._write(overrides or {})
        self.proc = None

    def _write(self, overrides):
        clouds = self.bed.cloud.clouds_yaml(os.path.join(self.workdir, "clouds.yaml"))
        inventory = os.path.join(self.workdir, "bmc.yaml")
        fd = os.open(inventory, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            yaml.safe_dump(self.bed.inventory(), f)
        groups = {g: dict(v) for g, v in TIMINGS.items()}
        groups["DEFAULT"] = {"cloud": "realnova", "clouds_file": str(clouds),
                             "status_file": self.status_path}
        groups["fencing"]["inventory"] = inventory
        groups["journal"] = {"connection": self.journal_url}
        for group, values in overrides.items():
            groups.setdefault(group, {}).update(values)
        path = os.path.join(self.workdir, "instanceha.conf")
        with open(path, "w") as f:
            for group in ["DEFAULT"] + [g for g in groups if g != "DEFAULT"]:
                f.write("[%s]\n" % group)
                for key, value in groups[group].items():
                    if isinstance(value, bool):
                        value = str(value).lower()
                    f.write("%s = %s\n" % (key, value))
                f.write("\n")
        return path

    def start(self):
        env = dict(os.environ)
        env.pop("OS_CLIENT_CONFIG_FILE", None)
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "instanceha.cmd.main", "run",
                 "--config-file", self.conf_path],
                stdout=log, stderr=subprocess.STDOUT, env=env)
        self.wait(lambda: len(self.states()) >= len(self.bed.hosts), 60,
                  "seeing every host")
        return self

    def stop(self):
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None

    # -- what the engine says about itself
    def status(self):
        try:
            with open(self.status_path) as f:
                return json.load(f)
        except (OSError, ValueError):
            return {"hosts": []}

    def states(self):
        if self.proc is not None and self.proc.poll() is not None:
            raise PeerError("instanceha", "engine exited with status %s"
                            % self.proc.returncode, self.log_path)
        return {h["name"]: (h["state"], h.get("reason") or "")
                for h in self.status().get("hosts", [])}

    def wait(self, predicate, timeout, what):
        deadline = time.monotonic() + timeout
        while True:
            value = predicate()
            if value:
                return value
            if time.monotonic() > deadline:
                raise PeerError("instanceha", "not %s after %ss (states: %s)"
                                % (what, timeout, self.states()), self.log_path)
            time.sleep(0.3)

    def wait_state(self, host, state, timeout=90):
        return self.wait(lambda: self.states().get(host, ("",))[0] == state
                         and self.states()[host], timeout,
                         "%s %s" % (host, state))

    def journal(self):
        return Journal(self.journal_url)

    def log_text(self):
        with open(self.log_path, errors="replace") as f:
            return f.read()
