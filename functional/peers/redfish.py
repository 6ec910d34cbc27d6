"""Redfish BMCs: sushy-tools' emulator with its fake systems driver.

One emulator process per host, so each host's BMC can misbehave on its own
(``refuse_power_off``). Each serves one system over TLS (a self-signed
certificate made per run, its file usable as the CA bundle) with HTTP basic
auth (bcrypt htpasswd). Power changes apply after ``power_delay`` seconds
(default 0). State lives in a per-run directory, so a restarted emulator
keeps its power state.
"""

import os
import pathlib
import secrets
import subprocess
import sys
import uuid

import requests

from functional.peers import procs, venvs
from functional.peers.errors import PeerError, PeerMissing

HERE = pathlib.Path(__file__).resolve().parent


def make_cert(directory, log):
    """Self-signed certificate for 127.0.0.1; returns (cert, key) paths."""
    cert, key = directory / "cert.pem", directory / "key.pem"
    if not cert.exists():
        procs.run("redfish-tls", ["openssl", "req", "-x509", "-newkey", "rsa:2048",
                                  "-nodes", "-keyout", key, "-out", cert,
                                  "-days", "3", "-subj", "/CN=127.0.0.1",
                                  "-addext", "subjectAltName=IP:127.0.0.1"], log)
    return cert, key


class RedfishBMC:
    driver = "redfish"

    def __init__(self, host, workdir, username="admin", password=None,
                 power_delay=0, refuse_power_off=False):
        self.host = host
        self.dir = pathlib.Path(workdir) / ("redfish-%s" % host)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.username = username
        self.password = password or secrets.token_urlsafe(12)
        self.power_delay = power_delay
        self.refuse_power_off = refuse_power_off
        self.system_uuid = str(uuid.uuid5(uuid.NAMESPACE_DNS, host))
        self.port = procs.free_port()
        self.log = self.dir / "emulator.log"
        self.proc = None
        self.cert = self.key = None
        self._http = requests.Session()
        self._http.trust_env = False  # this machine exports REQUESTS_CA_BUNDLE

    @property
    def address(self):
        return "https://127.0.0.1:%d" % self.port

    @property
    def system_path(self):
        return "/redfish/v1/Systems/%s" % self.system_uuid

    def inventory_entry(self):
        return {"driver": "redfish", "address": self.address,
                "username": self.username, "password": self.password,
                "system_id": self.system_path, "verify": str(self.cert)}

    def _write_files(self):
        import_bcrypt = ("import bcrypt,sys; sys.stdout.write(bcrypt.hashpw("
                         "sys.stdin.buffer.read(), bcrypt.gensalt(4)).decode())")
        res = subprocess.run([str(venvs.sushy_venv() / "bin" / "python"), "-c",
                              import_bcrypt], input=self.password.encode(),
                             capture_output=True, timeout=60)
        if res.returncode != 0:
            raise PeerError("redfish-%s" % self.host, "cannot hash password: %s"
                            % res.stderr.decode()[-300:], self.log)
        (self.dir / "htpasswd").write_text("%s:%s\n" % (self.username,
                                                       res.stdout.decode()))
        self.cert, self.key = make_cert(self.dir, self.log)
        conf = {
            "SUSHY_EMULATOR_LISTEN_IP": "127.0.0.1",
            "SUSHY_EMULATOR_LISTEN_PORT": self.port,
            "SUSHY_EMULATOR_SSL_CERT": str(self.cert),
            "SUSHY_EMULATOR_SSL_KEY": str(self.key),
            "SUSHY_EMULATOR_AUTH_FILE": str(self.dir / "htpasswd"),
            "SUSHY_EMULATOR_STATE_DIR": str(self.dir / "state"),
            "SUSHY_EMULATOR_FAKE_DRIVER": True,
            "SUSHY_EMULATOR_DISABLE_POWER_OFF": bool(self.refuse_power_off),
            "SUSHY_EMULATOR_FAKE_SYSTEMS": [{
                "uuid": self.system_uuid, "name": self.host,
                "power_state": "On", "external_notifier": False,
                "nics": [{"mac": "52:54:00:aa:bb:%02x" % (self.port % 256),
                          "ip": "127.0.0.1"}]}],
        }
        (self.dir / "emulator.conf").write_text(
            "".join("%s = %r\n" % kv for kv in conf.items()))

    def start(self):
        if self.proc is None:
            self._write_files()
        env = dict(os.environ, IHA_REDFISH_POWER_DELAY=str(int(self.power_delay)))
        env.pop("PYTHONPATH", None)
        python = venvs.sushy_venv() / "bin" / "python"
        if not python.exists():
            raise PeerMissing("redfish-%s" % self.host, "no sushy venv at %s"
                              % python, self.log)
        self.proc = procs.Proc("redfish-%s" % self.host,
                               [python, HERE / "sushy_launch.py", "--config",
                                self.dir / "emulator.conf"], self.log, env=env)
        self.proc.start()
        procs.wait_until(lambda: self._get("/redfish/v1/").status_code == 200,
                         30, "answering over TLS", "redfish-%s" % self.host,
                         self.log, procs=[self.proc])
        return self

    def stop(self):
        if self.proc:
            self.proc.kill()

    def restart(self, refuse_power_off=None):
        """Restart the emulator (power state is kept), optionally changing
        whether it refuses power-off."""
        if refuse_power_off is not None:
            self.refuse_power_off = refuse_power_off
        self.stop()
        self._write_files()
        return self.start()

    # -- a client of our own, used by the BMC link and by assertions
    def _get(self, path):
        return self._http.get(self.address + path, auth=(self.username, self.password),
                              verify=str(self.cert), timeout=5)

    def _post(self, path, body):
        return self._http.post(self.address + path, json=body,
                               auth=(self.username, self.password),
                               verify=str(self.cert), timeout=5)

    def power_state(self):
        """'on' or 'off' as the emulator reports it (applies due changes)."""
        resp = self._get(self.system_path)
        if resp.status_code != 200:
            raise PeerError("redfish-%s" % self.host, "GET system answered %d"
                            % resp.status_code, self.log)
        return resp.json()["PowerState"].lower()

    def reset(self, reset_type):
        resp = self._post(self.system_path + "/Actions/ComputerSystem.Reset",
                          {"ResetType": reset_type})
        if resp.status_code >= 400:
            raise PeerError("redfish-%s" % self.host, "reset %s answered %d: %s"
                            % (reset_type, resp.status_code, resp.text[:200]),
                            self.log)

    def power_on(self):
        self.reset("On")

    def power_off(self):
        self.reset("ForceOff")


def start_bmcs(hosts, workdir, **kwargs):
    bmcs = {}
    try:
        for host in hosts:
            bmcs[host] = RedfishBMC(host, workdir, **kwargs).start()
    except BaseException:
        for b in bmcs.values():
            b.stop()
        raise
    return bmcs


if __name__ == "__main__":  # manual check: python -m functional.peers.redfish DIR
    b = RedfishBMC("compute-x", sys.argv[1]).start()
    print(b.address, b.power_state())
    b.power_off()
    print(b.power_state())
    b.stop()
