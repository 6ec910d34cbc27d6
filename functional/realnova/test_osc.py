"""``openstack instanceha ...`` (the OpenStackClient plugin) against the
real engine on the bed in Keystone mode.

The engine's operator API is behind keystonemiddleware and the bed's
Keystone, its URL registered in the catalog as service type
``instanceha``. The real ``openstack`` command runs as a subprocess with
a user's credentials in OS_* variables (no clouds.yaml): as the bed's
admin it lists the bed's computes with the states the engine holds (Nova
reports every one enabled and up), suspends one and resumes it; a
member's token is refused as the API refuses it, with its text and a
non-zero exit. No password reaches the engine's log.
"""

import json
import os
import subprocess
import sys

from functional.realnova import keystone_api

OPENSTACK = os.path.join(os.path.dirname(sys.executable), "openstack")


def _openstack(ks, user, *args):
    """The ``openstack`` CLI as ``user`` of the bed's Keystone."""
    return subprocess.run(
        [OPENSTACK, "instanceha"] + list(args), capture_output=True,
        text=True, timeout=120,
        env=keystone_api.openstack_env(os.environ, ks.credentials(user)))


def _listed(ks, user="admin"):
    out = _openstack(ks, user, "host", "list", "-f", "json")
    assert out.returncode == 0, out.stdout + out.stderr
    return {row["Host"]: row["State"] for row in json.loads(out.stdout)}


def test_openstack_instanceha_with_the_users_keystone_session(
        keystone_bed, keystone_engine):
    bed = keystone_bed
    ks = bed.keystone
    assert os.path.exists(OPENSTACK), "python-openstackclient is not " \
        "installed beside %s (requirements.txt)" % sys.executable
    eng = keystone_engine(overrides=keystone_api.engine_overrides(ks))
    eng.start()
    api = eng.status()["api"]
    with keystone_api.operator_endpoint(ks, api):
        # Every compute of the bed, in the state the engine holds; Nova
        # says each is enabled and up.
        listed = _listed(ks)
        assert listed == {h: s for h, (s, _r) in eng.states().items()}
        assert sorted(listed) == sorted(bed.hosts)
        assert set(listed.values()) == {"active"}, listed
        for h in bed.hosts:
            svc = bed.cloud.service(h)
            assert (svc["status"], svc["state"]) == ("enabled", "up"), svc

        # A member's token: refused by the API's policy, its text shown.
        host = bed.hosts[-1]
        out = _openstack(ks, "demo", "host", "list")
        assert out.returncode != 0 and out.stdout == ""
        assert ("instanceha: status refused (403): policy does not allow "
                "instanceha:status:read") in out.stderr, out.stderr
        out = _openstack(ks, "demo", "host", "suspend", host, "--forever")
        assert out.returncode != 0
        assert ("instanceha: suspend refused (403): policy does not allow "
                "instanceha:host:suspend") in out.stderr, out.stderr
        assert eng.states()[host][0] == "active"

        # The API's own refusal of a command the state does not allow.
        out = _openstack(ks, "admin", "host", "resume", host)
        assert out.returncode != 0
        assert "instanceha: resume refused (409): resume does not apply " \
            "to host %s in state active" % host in out.stderr, out.stderr

        # The admin commands: suspend, seen in list and show; resume.
        out = _openstack(ks, "admin", "host", "suspend", host, "--forever",
                         "--reason", "firmware", "-f", "json")
        assert out.returncode == 0, out.stdout + out.stderr
        answer = json.loads(out.stdout)
        assert answer["host"] == host and answer["until"] == "forever"
        assert answer["state_before"] == "active"
        eng.wait_state(host, "suspended", timeout=30)
        assert _listed(ks)[host] == "suspended"
        out = _openstack(ks, "admin", "host", "show", host, "-f", "json")
        assert out.returncode == 0, out.stdout + out.stderr
        shown = json.loads(out.stdout)
        assert shown["state"] == "suspended" and "firmware" in shown["reason"]

        out = _openstack(ks, "admin", "host", "resume", host, "--reason",
                         "done")
        assert out.returncode == 0, out.stdout + out.stderr
        eng.wait_state(host, "active", timeout=30)
        out = _openstack(ks, "admin", "host", "history", host, "-f", "json")
        assert out.returncode == 0, out.stdout + out.stderr
        moves = [e["What"] for e in json.loads(out.stdout)
                 if e["Kind"] == "transition"]
        assert "active -> suspended" in moves, moves

    # Without the endpoint in the catalog: said, non-zero.
    out = _openstack(ks, "admin", "host", "list")
    assert out.returncode != 0
    assert "no 'instanceha' endpoint in the Keystone catalog" in out.stderr
    log = eng.log_text()
    for user in ("admin", "demo"):
        assert ks.credentials(user)["password"] not in log
