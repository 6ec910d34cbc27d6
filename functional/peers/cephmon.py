"""A real Ceph monitor (Debian ceph-mon) on loopback, for storage fencing.

One monitor, no OSD: the OSD map, and so the blocklist, is kept by the
monitor alone. Its cluster directory (ceph.conf, monmap, mon data, run
dir, logs) is under the test's temporary directory; auth is off (a
loopback cluster of the test's own) and only msgr v1 is bound, on a free
port. Paxos proposes at once so a blocklist change commits in
milliseconds. :meth:`CephMon.ceph` runs the ``ceph`` CLI against it: an
independent reader of what the driver did.

Missing programs raise PeerMissing naming the Debian packages
(tools/test-packages.sh installs them).
"""

import json
import os
import shutil
import subprocess
import time
import uuid

from functional.peers.errors import PeerError, PeerMissing
from functional.peers.procs import Proc, StartedOnEnter, free_port

PROGRAMS = {"ceph-mon": "ceph-mon", "monmaptool": "ceph-base",
            "ceph": "ceph-common"}


class CephMon(StartedOnEnter):
    def __init__(self, root):
        self.root = os.path.abspath(str(root))
        self.conf = os.path.join(self.root, "ceph.conf")
        self.port = None
        self.proc = None

    def _write_conf(self):
        fsid = str(uuid.uuid4())
        self.port = free_port()
        for sub in ("run", "mon", "log"):
            os.makedirs(os.path.join(self.root, sub), exist_ok=True)
        with open(self.conf, "w") as f:
            f.write("\n".join([
                "[global]",
                "fsid = %s" % fsid,
                "mon host = 127.0.0.1:%d" % self.port,
                "auth cluster required = none",
                "auth service required = none",
                "auth client required = none",
                "ms bind msgr2 = false",
                "run dir = %s/run" % self.root,
                "log file = %s/log/$name.log" % self.root,
                "admin socket = %s/run/$name.asok" % self.root,
                "mon data = %s/mon/$cluster-$id" % self.root,
                "paxos propose interval = 0.01",
                "paxos min wait = 0.01",
                "mon allow pool delete = true",
                "keyring = /dev/null",
                ""]))
        return fsid

    def _run(self, argv, timeout=30):
        try:
            done = subprocess.run(argv, capture_output=True, text=True,
                                  timeout=timeout)
        except subprocess.TimeoutExpired:
            raise PeerError("ceph-mon", "%s did not finish in %ds"
                            % (argv[0], timeout))
        if done.returncode != 0:
            raise PeerError("ceph-mon", "%s failed (%d): %s" % (
                " ".join(argv), done.returncode,
                (done.stderr or done.stdout).strip()[-2000:]))
        return done.stdout

    def start(self, timeout=30):
        for program, package in PROGRAMS.items():
            if shutil.which(program) is None:
                raise PeerMissing("ceph-mon", "%s is missing: install the "
                                  "Debian package %s (tools/test-packages.sh "
                                  "does)" % (program, package))
        fsid = self._write_conf()
        monmap = os.path.join(self.root, "monmap")
        self._run(["monmaptool", "--create", "--add", "a",
                   "127.0.0.1:%d" % self.port, "--fsid", fsid, monmap])
        self._run(["ceph-mon", "-c", self.conf, "--mkfs", "-i", "a",
                   "--monmap", monmap])
        self.proc = Proc("ceph-mon", ["ceph-mon", "-f", "-c", self.conf,
                                      "-i", "a"],
                         os.path.join(self.root, "log", "ceph-mon.out"))
        self.proc.start()
        deadline = time.monotonic() + timeout
        last = None
        while time.monotonic() < deadline:
            self.proc.check()
            try:
                self.ceph("mon", "stat", timeout=5)
                return self
            except PeerError as e:
                last = e
            time.sleep(0.2)
        raise PeerError("ceph-mon", "no answer within %ds: %s"
                        % (timeout, last), self.proc.log)

    def ceph(self, *args, timeout=15):
        """The ``ceph`` CLI against this monitor; its JSON output parsed
        (the first JSON value: Ceph 16 appends a second to some lists)."""
        out = self._run(["ceph", "-c", self.conf,
                         "--connect-timeout", str(int(timeout)),
                         "--format", "json"] + list(args),
                        timeout=timeout + 5)
        out = out.strip()
        if not out:
            return None
        return json.JSONDecoder().raw_decode(out)[0]

    def blocklist(self):
        """The addresses the monitor blocklists, as ``ceph osd blocklist
        ls`` says."""
        return {entry["addr"] for entry in
                self.ceph("osd", "blocklist", "ls") or ()}

    def stop(self):
        if self.proc is not None:
            self.proc.stop()
