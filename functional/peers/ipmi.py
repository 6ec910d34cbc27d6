"""IPMI BMCs: OpenIPMI's ``ipmi_sim``, one process per host, on UDP loopback.

Power lives in a file the chassis-control script (``chassis_control.sh``)
reads and writes: ``1`` on, ``0`` off. ``refuse_power_off(True)`` makes the
BMC reject every power change, as a BMC that will not fence. Clients use
Debian's ``ipmitool -I lanplus -C 3`` (ipmi_sim ignores the cipher-suite
query, so without ``-C`` every call waits ~10 s).
"""

import os
import pathlib
import secrets
import shutil
import subprocess

from functional.peers import procs
from functional.peers.errors import PeerError, PeerMissing

HERE = pathlib.Path(__file__).resolve().parent


class IPMIBMC:
    driver = "ipmi"

    def __init__(self, host, workdir, username="admin", password=None,
                 guid=None):
        """``guid``: the 32 hex digits Get System GUID answers, byte for
        byte (random by default)."""
        self.host = host
        self.guid = guid or secrets.token_hex(16)
        self.dir = pathlib.Path(workdir) / ("ipmi-%s" % host)
        (self.dir / "state").mkdir(parents=True, exist_ok=True)
        self.username = username
        self.password = password or secrets.token_hex(6)  # IPMI: max 16/20 bytes
        self.port = procs.free_port(kind=__import__("socket").SOCK_DGRAM)
        self.power_file = self.dir / "power"
        self.log = self.dir / "ipmi_sim.log"
        self.proc = None

    @property
    def name(self):
        return "ipmi-%s" % self.host

    def inventory_entry(self):
        return {"driver": "ipmi", "address": "127.0.0.1", "port": self.port,
                "username": self.username, "password": self.password,
                "cipher_suite": 3}

    def _write_files(self):
        if not self.power_file.exists():
            self.power_file.write_text("1\n")
        auths = "none md2 md5 straight"
        (self.dir / "lan.conf").write_text(
            'name "%s"\n'
            "set_working_mc 0x20\n"
            "  startlan 1\n"
            "    addr 127.0.0.1 %d\n"
            "    priv_limit admin\n"
            "    allowed_auths_callback %s\n"
            "    allowed_auths_user %s\n"
            "    allowed_auths_operator %s\n"
            "    allowed_auths_admin %s\n"
            "    guid %s\n"
            "  endlan\n"
            '  chassis_control "%s %s"\n'
            '  user 2 true "%s" "%s" admin 10 %s\n'
            % (self.name, self.port, auths, auths, auths, auths,
               self.guid, HERE / "chassis_control.sh",
               self.power_file, self.username, self.password, auths))
        (self.dir / "bmc.emu").write_text(
            "mc_setbmc 0x20\n"
            "mc_add 0x20 0 no-device-sdrs 0x23 9 8 0x9f 0x1291 0xf02 persist_sdr\n"
            "sel_enable 0x20 50 0x0a\n"
            "mc_enable 0x20\n")

    def start(self):
        exe = shutil.which("ipmi_sim")
        if not exe or not shutil.which("ipmitool"):
            raise PeerMissing(self.name, "ipmi_sim/ipmitool not installed "
                              "(tools/realpeers/install.sh installs openipmi "
                              "and ipmitool)", self.log)
        self._write_files()
        self.proc = procs.Proc(self.name, [exe, "-c", self.dir / "lan.conf",
                                           "-f", self.dir / "bmc.emu",
                                           "-s", self.dir / "state", "-n"],
                               self.log).start()
        procs.wait_until(lambda: self.ipmitool("mc", "info", retries=1).returncode == 0,
                         20, "answering ipmitool", self.name, self.log,
                         procs=[self.proc], interval=0.2)
        return self

    def stop(self):
        if self.proc:
            self.proc.kill()

    def ipmitool(self, *args, retries=2):
        env = dict(os.environ, IPMI_PASSWORD=self.password,
                   IPMITOOL_PASSWORD=self.password)
        return subprocess.run(
            ["ipmitool", "-I", "lanplus", "-C", "3", "-H", "127.0.0.1",
             "-p", str(self.port), "-U", self.username, "-E",
             "-N", "1", "-R", str(retries)] + list(args),
            env=env, capture_output=True, timeout=30)

    def add_sel(self, *entries):
        """Add system event records to the BMC's event log (``ipmitool sel
        add``): each entry 7 bytes, EvM Rev, sensor type, sensor number,
        event direction and type, event data 1 to 3 (``"0x04 0x08 0x01
        0x6f 0x01 0x00 0x00"``: a power supply's failure detected)."""
        path = self.dir / "sel-add.txt"
        path.write_text("".join(e + "\n" for e in entries))
        res = self.ipmitool("sel", "add", str(path))
        if res.returncode != 0:
            raise PeerError(self.name, "sel add failed: %s"
                            % res.stderr.decode()[-300:], self.log)

    # -- state as the test bed sees it (the file is the truth)
    def power_state(self):
        text = self.power_file.read_text().strip()
        if text not in ("0", "1"):
            raise PeerError(self.name, "power file holds %r" % text, self.log)
        return "on" if text == "1" else "off"

    def power_on(self):
        self.power_file.write_text("1\n")

    def power_off(self):
        self.power_file.write_text("0\n")

    def refuse_power_off(self, refuse=True):
        switch = pathlib.Path(str(self.power_file) + ".refuse")
        if refuse:
            switch.write_text("on\n")
        elif switch.exists():
            switch.unlink()

    def calls(self):
        """The chassis-control calls ipmi_sim made (one line each)."""
        try:
            return pathlib.Path(str(self.power_file) + ".log").read_text().splitlines()
        except FileNotFoundError:
            return []
