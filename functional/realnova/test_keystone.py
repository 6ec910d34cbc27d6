"""The real engine against Nova behind a real Keystone.

On the bed in Keystone mode nova-api and placement run their own paste
pipelines with keystonemiddleware's ``auth_token``; the engine reads a
clouds.yaml with a password or an application credential and finds Nova in
Keystone's catalog. Every assertion reads Nova's API (as the bed's admin)
or Keystone's own records.
"""

import datetime
import re
import time

import pytest
import yaml

from functional.peers import procs
from functional.realnova.engine import boot_victims


def _assert_evacuated_by(bed, host, ids, user):
    """Every server ACTIVE on another host, the host forced down and
    disabled by instanceha, and each evacuation requested by ``user``
    (Nova records the requester of a migration from microversion 2.80)."""
    bed.cloud.wait_servers(ids, timeout=60)
    procs.wait_until(lambda: all(bed.cloud.server(s)["OS-EXT-SRV-ATTR:host"]
                                 not in (host, None) for s in ids), 60,
                     "servers rebuilt elsewhere", "nova-conductor",
                     bed.cloud.log_of("nova-conductor"))
    svc = bed.cloud.service(host)
    assert svc["forced_down"] is True and svc["status"] == "disabled", svc
    assert svc["disabled_reason"].startswith("instanceha: "), svc
    migs = bed.cloud.get("/os-migrations?migration_type=evacuation",
                         microversion="2.80")["migrations"]
    migs = [m for m in migs if m["source_compute"] == host]
    assert {m["instance_uuid"] for m in migs} == set(ids)
    assert {m["user_id"] for m in migs} == {bed.keystone.user_id(user)}, migs
    return migs


def _recover(bed, eng, host, ids):
    bed.cloud.kill_compute(host)
    eng.wait_state(host, "evacuated", timeout=150)
    assert bed.bmc(host).power_state() == "off"


def test_nova_and_placement_demand_keystone_tokens(keystone_bed):
    bed = keystone_bed
    ks = bed.keystone
    http = bed.cloud._session()
    api = bed.cloud.api_url
    for headers in ({}, {"X-Auth-Token": "admin:admin"}):
        assert http.get(api + "/servers", headers=headers,
                        timeout=30).status_code == 401
        assert http.get(bed.cloud.placement_url + "/resource_providers",
                        headers=headers, timeout=30).status_code == 401
    member = {"X-Auth-Token": ks.token("demo")}
    reader = {"X-Auth-Token": ks.token("observer")}
    admin = {"X-Auth-Token": ks.admin_token()}
    assert http.get(api + "/servers", headers=member, timeout=30).status_code == 200
    assert http.get(api + "/servers", headers=reader, timeout=30).status_code == 200
    assert http.get(api + "/os-services", headers=member,
                    timeout=30).status_code == 403
    assert http.get(api + "/os-services", headers=admin,
                    timeout=30).status_code == 200
    # Placement reached as Nova reaches it: a token from the catalog's
    # identity service, the endpoint from the catalog.
    _tok, body = ks.authenticate("placement", ks.credentials("placement")[
        "password"], "service")
    urls = {s["type"]: [e["url"] for e in s["endpoints"]
                        if e["interface"] == "public"] for s in body["catalog"]}
    assert urls["compute"] == [api]
    assert urls["placement"] == [bed.cloud.placement_url]
    resp = http.get(bed.cloud.placement_url + "/resource_providers",
                    headers={"X-Auth-Token": _tok,
                             "OpenStack-API-Version": "placement 1.14"},
                    timeout=30)
    assert resp.status_code == 200
    assert {rp["name"] for rp in resp.json()["resource_providers"]} >= set(bed.hosts)


def test_password_auth_engine_recovers_dead_compute(keystone_bed, keystone_engine):
    bed = keystone_bed
    host = bed.hosts[0]
    ids = boot_victims(bed, host)
    eng = keystone_engine()
    with open(eng.workdir + "/clouds.yaml") as f:
        cloud = yaml.safe_load(f)["clouds"]["realnova"]
    assert cloud["auth_type"] == "password"
    assert "compute_endpoint_override" not in cloud   # Nova from the catalog
    eng.start()
    _recover(bed, eng, host, ids)
    _assert_evacuated_by(bed, host, ids, "instanceha")
    ok = [a for a in bed.keystone.authentications("instanceha")
          if a["outcome"] == "success"]
    assert ok, "Keystone recorded no authentication of the engine's user"
    assert bed.keystone.credentials("instanceha")["password"] not in eng.log_text()


def test_application_credential_engine_recovers_dead_compute(keystone_bed,
                                                            keystone_engine):
    bed = keystone_bed
    ks = bed.keystone
    host = bed.hosts[1]
    ids = boot_victims(bed, host)
    cred = ks.application_credential("instanceha", "instanceha-engine-%d"
                                     % int(time.time()))
    eng = keystone_engine(auth={
        "auth_type": "v3applicationcredential",
        "auth": {"auth_url": ks.url,
                 "application_credential_id": cred["id"],
                 "application_credential_secret": cred["secret"]}})
    with open(eng.workdir + "/clouds.yaml") as f:
        text = f.read()
    # nothing but the application credential to authenticate with
    assert ks.credentials("instanceha")["password"] not in text
    assert "username" not in text
    started = time.time()
    eng.start()
    _recover(bed, eng, host, ids)
    # Tokens from an application credential act as its user.
    _assert_evacuated_by(bed, host, ids, "instanceha")
    after = [a for a in ks.authentications("instanceha")
             if a["time"] and a["time"] >= started - 1]
    assert after and {a["outcome"] for a in after} == {"success"}, after
    assert cred["secret"] not in eng.log_text()


#: [token] expiration for the expiry scenario: well below any recovery on
#: the bed (detection alone takes 6-10 s). keystoneauth renews a token with
#: less than 120 s left, so the engine asks for a new one before each
#: request once a token is that short-lived; Keystone and Nova refuse each
#: one 5 s after its issue.
SHORT_TOKEN = 5


# CI runs the revocation test, which makes Nova refuse the engine's token
# mid-recovery (keystoneauth renews a token near its expiry before use).
@pytest.mark.long
def test_token_expiring_mid_recovery_is_renewed(keystone_bed, keystone_engine):
    bed = keystone_bed
    ks = bed.keystone
    host = bed.hosts[2]
    ks.restart(token_expiration=SHORT_TOKEN)
    try:
        ids = boot_victims(bed, host)
        eng = keystone_engine()
        started = time.time()
        eng.start()
        killed = time.time()
        _recover(bed, eng, host, ids)
        done = time.time()
        _assert_evacuated_by(bed, host, ids, "instanceha")
        auths = [a for a in ks.authentications("instanceha")
                 if a["time"] >= started - 1]
        assert {a["outcome"] for a in auths} == {"success"}, auths
        during = [a["time"] for a in auths if killed <= a["time"] <= done]
        # a token issued after the host died expired before the recovery
        # ended ...
        expired = [t for t in during if t + SHORT_TOKEN < done]
        assert expired, (killed, done, during)
        # ... and the engine went on with tokens issued after that expiry
        renewed = [t for t in during if t > expired[0] + SHORT_TOKEN]
        assert renewed, (killed, done, during)
    finally:
        ks.restart(token_expiration=3600)


def _nova_401s(bed, since, until):
    """Times of the requests nova-api answered 401 (its request log logs
    them before the auth filter runs) between ``since`` and ``until``."""
    out = []
    pattern = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d+) .*"
                         r"nova\.api\.openstack\.requestlog.*status: 401")
    with open(bed.cloud.log_of("nova-api"), errors="replace") as f:
        for line in f:
            m = pattern.match(line)
            if m:
                t = datetime.datetime.strptime(
                    m.group(1), "%Y-%m-%d %H:%M:%S.%f").timestamp()
                if since <= t <= until:
                    out.append(t)
    return out


def test_token_revoked_mid_recovery_is_replaced(keystone_bed, keystone_engine):
    """A token Nova refuses while the engine still holds it (Keystone
    revoked every token of the engine's user, as a password change does)
    makes the engine authenticate again; the recovery completes."""
    bed = keystone_bed
    ks = bed.keystone
    host = bed.hosts[1]
    ids = boot_victims(bed, host)
    eng = keystone_engine()
    eng.start()
    bed.cloud.kill_compute(host)
    eng.wait(lambda: eng.states().get(host, ("",))[0] in (
        "suspect", "fencing", "fenced", "evacuating", "evacuated"),
        60, "%s seen dead" % host)
    if eng.states()[host][0] == "evacuated":
        pytest.fail("recovery ended before the revocation could happen")
    revoked = time.time()
    ks.revoke_user_tokens("instanceha")
    eng.wait_state(host, "evacuated", timeout=150)
    done = time.time()
    _assert_evacuated_by(bed, host, ids, "instanceha")
    refused = _nova_401s(bed, revoked, done)
    assert refused, "Nova refused no request after the revocation"
    again = [a for a in ks.authentications("instanceha")
             if a["time"] > revoked and a["outcome"] == "success"]
    assert again, "the engine did not authenticate after the revocation"
