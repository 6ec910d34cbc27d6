"""Find (and on a fresh machine build) the peers' venvs.

``tools/realpeers/install.sh`` is idempotent and keyed by versions, so a warm
call returns in well under a second. ``INSTANCEHA_NOVA_VENV``,
``INSTANCEHA_KEYSTONE_VENV`` and ``INSTANCEHA_SUSHY_VENV`` point at existing
venvs instead.
"""

import functools
import os
import pathlib
import subprocess

from functional.peers.errors import PeerMissing

REPO = pathlib.Path(__file__).resolve().parents[2]
INSTALL = REPO / "tools" / "realpeers" / "install.sh"


@functools.lru_cache(maxsize=None)
def venvs():
    given = {k: os.environ.get("INSTANCEHA_" + k)
             for k in ("NOVA_VENV", "KEYSTONE_VENV", "SUSHY_VENV")}
    if all(given.values()):
        return given
    log = pathlib.Path(os.environ.get("TMPDIR", "/tmp")) / "instanceha-realpeers-install.log"
    with open(log, "ab") as logf:
        res = subprocess.run(["bash", str(INSTALL)], stdout=subprocess.PIPE,
                             stderr=logf, timeout=1800)
    if res.returncode != 0:
        raise PeerMissing("install", "tools/realpeers/install.sh exited %d"
                          % res.returncode, log)
    found = dict(line.split("=", 1) for line in
                 res.stdout.decode().splitlines() if "=" in line)
    found.update((k, v) for k, v in given.items() if v)
    return found


def nova_venv():
    return pathlib.Path(venvs()["NOVA_VENV"])


def keystone_venv():
    path = pathlib.Path(venvs()["KEYSTONE_VENV"])
    if not (path / "bin" / "keystone-manage").exists():
        raise PeerMissing("keystone", "no keystone-manage in %s (run "
                          "tools/realpeers/install.sh or fix "
                          "INSTANCEHA_KEYSTONE_VENV)" % path)
    return path


def sushy_venv():
    return pathlib.Path(venvs()["SUSHY_VENV"])
