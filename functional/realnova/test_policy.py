"""Recovery policies (doc/policy.md) on real Nova 34: the real engine
process, real computes dying.

1. Evacuable tagging and priority order, on one host death: the servers
   tagged evacuable (metadata, or the server tag) are rebuilt elsewhere, one
   at a time in priority order; the untagged one stays on the dead host,
   with its reason in the journal and in ``instanceha status``.
2. A full cluster: the dead host's servers find no valid host (the one live
   compute is too full for them, the third is disabled as a spare), the host
   waits ``pending`` saying why; the spare is enabled through Nova's API and
   the next retry rebuilds them there. Twice: with the capacity preflight
   (the default: nothing is sent, Placement's counts say why) and without
   it (Nova's scheduler answers No valid host).
3. The same full cluster with a reserved host (disabled, reason
   ``reserved: spares``) and ``[reserved_hosts]`` on: instanceha enables
   it, the servers are rebuilt there; once the lost host is back it is
   re-enabled and the reserved host disabled again with its own reason,
   the servers staying on it (``return_to_reserve``).

Every assertion reads Nova's API (servers, services, migrations) or what
the engine must record (journal, status); never a sequence of calls.
"""

import datetime
import subprocess
import sys
import time

import pytest

from functional import waiting
from functional.peers import nova as novapeer

PRIORITY_KEY = "instanceha:priority"
#: [evacuation] retry_backoff of the full-cluster tests: long enough that
#: the pending state holds still while it is read (a retry re-fences and
#: sends again), short enough for a retry soon after the spare is enabled
#: (today's engine retries at its next tick once a host is enabled).
RETRY_BACKOFF = 12.0


# -- helpers ------------------------------------------------------------------

def _boot(bed, host, specs, name, timeout=150):
    """One server per spec ({"flavor", "metadata", "tags"}) on ``host``,
    ACTIVE there; ids in the order of ``specs``.

    As boot_victims: right after the bed restarts a compute, Placement may
    offer no allocation candidate on it (No valid host) until the
    compute's next periodic resource update, so such a boot is deleted and
    tried again, until ``timeout``. A server in ERROR ends the
    wait at once (NovaCloud.wait_servers would poll it until its own
    timeout: procs.wait_until retries the predicate's exception)."""
    deadline = time.monotonic() + timeout
    while True:
        ids = []
        for i, spec in enumerate(specs):
            body = {"name": "%s-%s-%d" % (name, host, i),
                    "imageRef": novapeer.IMAGE_ID,
                    "flavorRef": spec.get("flavor", novapeer.FLAVOR_ID),
                    "networks": "none", "host": host}
            if spec.get("metadata"):
                body["metadata"] = spec["metadata"]
            if spec.get("tags"):
                body["tags"] = spec["tags"]
            resp = bed.cloud.call("POST", "/servers", {"server": body},
                                  microversion="2.74")
            ids.append(resp.json()["server"]["id"])

        def settled():
            servers = [bed.cloud.server(sid) for sid in ids]
            if any(s["status"] == "ERROR" for s in servers):
                return servers
            return all(s["status"] == "ACTIVE"
                       and s["OS-EXT-STS:task_state"] is None
                       and s["OS-EXT-SRV-ATTR:host"] == host
                       for s in servers) and servers
        servers = waiting.wait_for(
            settled, max(10, deadline - time.monotonic()),
            "servers %s ACTIVE on %s" % (ids, host), interval=0.5)
        errors = [s for s in servers if s["status"] == "ERROR"]
        if not errors:
            return ids
        # Nova sets the status before it writes the fault
        fault = waiting.poll(lambda: (bed.cloud.server(errors[0]["id"]).get(
            "fault") or {}).get("message"), 10, interval=0.5) or ""
        assert "No valid host" in fault and time.monotonic() < deadline, \
            errors[0]
        for sid in ids:
            bed.cloud.call("DELETE", "/servers/%s" % sid, ok=(204, 404))
        time.sleep(3)


def _set_service(bed, host, **body):
    svc = bed.cloud.service(host)
    bed.cloud.call("PUT", "/os-services/%s" % svc["id"], body,
                   microversion="2.53")
    return bed.cloud.service(host)


def _flavor(bed, flavor_id, ram):
    resp = bed.cloud.call("GET", "/flavors/%s" % flavor_id, ok=None)
    if resp.status_code == 200:
        if resp.json()["flavor"]["ram"] == ram:
            return flavor_id
        bed.cloud.call("DELETE", "/flavors/%s" % flavor_id)
    bed.cloud.call("POST", "/flavors", {"flavor": {
        "name": flavor_id, "id": flavor_id, "ram": ram, "vcpus": 1,
        "disk": 1}})
    return flavor_id


def _journal(eng):
    return eng.reading_journal()


def _status_cli(eng):
    """``instanceha status`` as an operator runs it."""
    out = subprocess.run(
        [sys.executable, "-m", "instanceha.cmd.main", "status",
         "--config-file", eng.conf_path],
        capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return out.stdout


def _status_cli_host(eng, host):
    """``instanceha status HOST``: the host's last recovery, per server
    and per reserved host."""
    out = subprocess.run(
        [sys.executable, "-m", "instanceha.cmd.main", "status", host,
         "--config-file", eng.conf_path],
        capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return out.stdout


def _status_line(text, host):
    return next((line for line in text.splitlines()
                 if line.split()[:1] == [host]), "")


def _created(server):
    """Nova's creation time of a server, as the engine orders ties."""
    return datetime.datetime.strptime(
        server["created"], "%Y-%m-%dT%H:%M:%SZ").replace(
            tzinfo=datetime.timezone.utc).timestamp()


# -- 1. tagging and priority --------------------------------------------------

def test_tagged_servers_evacuated_in_priority_order_untagged_left(bed,
                                                                  engine):
    host = bed.hosts[1]
    live = [h for h in bed.hosts if h != host]
    specs = [
        {"metadata": {"evacuable": "true", PRIORITY_KEY: "5"}},
        {"metadata": {"evacuable": "true", PRIORITY_KEY: "0"}},
        {"tags": ["evacuable"]},                    # priority unset: 0
        {"metadata": {"evacuable": "true", PRIORITY_KEY: "10"}},
        {},                                         # not tagged
    ]
    p5, p0, unset, p10, untagged = _boot(bed, host, specs, "policy")
    tagged = [p5, p0, unset, p10]
    eng = engine({"recovery": {"evacuable_tagging": True},
                  "evacuation": {"concurrency": 1}}).start()

    bed.cloud.kill_compute(host)
    state, reason = eng.wait_state(host, "evacuated", timeout=180)
    assert "4/4 servers evacuated, 1 not evacuable" in reason, reason
    assert untagged in reason and "not evacuable (evacuable tagging is on" \
        in reason, reason

    # Nova: the tagged ones ACTIVE on live hosts, the untagged one still on
    # the dead host, never sent anywhere.
    for s in bed.cloud.wait_servers(tagged, timeout=90):
        assert s["OS-EXT-SRV-ATTR:host"] in live, s
    assert bed.cloud.server(untagged)["OS-EXT-SRV-ATTR:host"] == host
    migs = bed.cloud.migrations(host)
    assert sorted(m["instance_uuid"] for m in migs) == sorted(tagged), migs
    assert {m["status"] for m in migs} == {"done"}, migs
    svc = bed.cloud.service(host)
    assert svc["forced_down"] and svc["status"] == "disabled", svc

    # Priority: 10, 5, then the two at 0, oldest first, then by id (Nova's
    # creation times have one-second resolution: they may tie).
    servers = {sid: bed.cloud.server(sid) for sid in tagged}
    expected = [p10, p5] + sorted(
        [p0, unset], key=lambda sid: (_created(servers[sid]), sid))
    by_nova = [m["instance_uuid"] for m in
               sorted(migs, key=lambda m: (m["created_at"], m["id"]))]
    assert by_nova == expected, (by_nova, expected, servers)

    with _journal(eng) as j:
        rows = [r for r in j.evacuations() if r["host_name"] == host]
    done = sorted((r for r in rows if r["status"] == "done"),
                  key=lambda r: r["requested_at"])
    assert [r["server_id"] for r in done] == expected, rows
    # concurrency 1: each sent only once the one before it was rebuilt
    for before, after in zip(done, done[1:]):
        assert after["requested_at"] >= before["finished_at"], (before, after)
    skipped = {r["server_id"]: r["detail"] for r in rows
               if r["status"] == "skipped"}
    assert list(skipped) == [untagged], rows
    assert "no evacuable on server" in skipped[untagged], skipped
    assert "not evacuable" in skipped[untagged], skipped

    line = _status_line(_status_cli(eng), host)
    assert "evacuated" in line.split()[:2], line
    assert "1 not evacuable (%s: no evacuable on server" % untagged in line, \
        line


# -- 2. a full cluster, then capacity -----------------------------------------

def _fill_cluster(bed, host, full, spare, reason="spare, kept empty"):
    """``host`` (to be lost) carries two "big" servers (3/8 of a compute
    each); ``full`` a filler (3/4), so neither fits there; ``spare`` is
    empty and disabled with ``reason``. Returns (ids, filler_id). The fake
    driver's computes are all the same size: read it rather than assume
    it.

    Each test takes as its spare the host the test before it killed: a
    compute the bed has just restored may get no allocation candidate from
    Placement until its next periodic resource update (up to a minute of
    boots retried on No valid host), while the spare is only asked to take
    servers once it has been enabled through the API."""
    hv = bed.cloud.get("/os-hypervisors/detail")["hypervisors"]
    mem = min(h["memory_mb"] for h in hv)
    big = _flavor(bed, "iha.policy.big", mem * 3 // 8)
    filler = _flavor(bed, "iha.policy.filler", mem * 3 // 4)
    (filler_id,) = _boot(bed, full, [{"flavor": filler}], "filler")
    ids = _boot(bed, host, [{"flavor": big}] * 2, "full")
    svc = _set_service(bed, spare, status="disabled",
                       disabled_reason=reason)
    assert (svc["status"], svc["disabled_reason"]) == ("disabled", reason), \
        svc
    return ids, filler_id


def _wait_pending(bed, eng, host, ids, detail):
    """The host waits pending; ``instanceha status`` and the journal (a
    no_capacity row per server) say why, each naming ``detail``. Returns
    the host's reason."""
    state, reason = eng.wait_state(host, "pending", timeout=150)
    assert "no capacity" in reason and "0/2 servers evacuated" in reason, \
        reason
    # The operator's view while it waits (the host is pending again after
    # each retry that still finds no room).
    line = waiting.wait_for(
        lambda: (lambda ln: "pending" in ln.split()[:2] and ln)(
            _status_line(_status_cli(eng), host)),
        60, "instanceha status to show %s pending" % host, interval=0.5)
    assert "no capacity" in line and detail in line, line
    with _journal(eng) as j:
        rows = [r for r in j.evacuations() if r["host_name"] == host]
    waited = [r for r in rows if r["status"] == "no_capacity"]
    assert {r["server_id"] for r in waited} == set(ids), rows
    assert all(detail in r["detail"] for r in waited), waited
    svc = bed.cloud.service(host)
    assert svc["forced_down"] and svc["status"] == "disabled", svc
    return reason, waited


def _recovers_on_spare(bed, eng, host, spare, ids):
    """The spare enabled through Nova's API: the next retry rebuilds every
    server there, after proving the host dead again."""
    svc = _set_service(bed, spare, status="enabled")
    assert svc["status"] == "enabled", svc
    enabled_at = time.time()
    state, reason = eng.wait_state(host, "evacuated", timeout=150)
    assert reason.startswith("2/2 servers evacuated"), reason
    for s in bed.cloud.wait_servers(ids, timeout=90):
        assert s["OS-EXT-SRV-ATTR:host"] == spare, s
    migs = bed.cloud.migrations(host)
    for sid in ids:
        assert [m["dest_compute"] for m in migs if m["instance_uuid"] == sid
                and m["status"] == "done"] == [spare], migs
    with _journal(eng) as j:
        rows = [r for r in j.evacuations() if r["host_name"] == host]
        steps = [t["dst"] for t in j.transitions() if t["host_name"] == host]
    done = [r for r in rows if r["status"] == "done"]
    assert sorted(r["server_id"] for r in done) == sorted(ids), rows
    assert {r["dest_host"] for r in done} == {spare}, rows
    assert all(r["requested_at"] >= enabled_at - 1 for r in done), rows
    last_wait = len(steps) - 1 - steps[::-1].index("pending")
    assert steps[last_wait + 1:] == ["fencing", "fenced", "evacuating",
                                     "evacuated"], steps
    return migs


def test_full_cluster_waits_pending_then_recovers_on_an_enabled_spare(
        bed, engine):
    """The capacity preflight ([capacity], on by default) reads Placement:
    no enabled host has room, so nothing is sent into a certain NoValidHost;
    the host waits pending, each server journalled with what it lacks. The
    spare is enabled and the next retry rebuilds both there."""
    host, full, spare = bed.hosts[0], bed.hosts[2], bed.hosts[1]
    ids, filler_id = _fill_cluster(bed, host, full, spare)
    eng = engine({"evacuation": {"retry_backoff": RETRY_BACKOFF,
                                 "max_attempts": 10}}).start()
    bed.cloud.kill_compute(host)
    reason, waited = _wait_pending(bed, eng, host, ids, "MB RAM")
    assert "2 of 2 servers wait for capacity: short of" in reason, reason
    assert all(r["detail"].startswith("preflight: ") for r in waited), waited
    # Nova: nothing was sent; the servers are untouched on the dead host.
    assert bed.cloud.migrations(host) == []
    for sid in ids:
        s = bed.cloud.server(sid)
        assert s["OS-EXT-SRV-ATTR:host"] == host, s
        assert s["status"] == "ACTIVE", s

    migs = _recovers_on_spare(bed, eng, host, spare, ids)
    assert sorted(m["instance_uuid"] for m in migs) == sorted(ids), migs
    assert bed.cloud.server(filler_id)["OS-EXT-SRV-ATTR:host"] == full


# CI runs the same wait with the preflight on
# (test_full_cluster_waits_pending_then_recovers_on_an_enabled_spare).
@pytest.mark.long
def test_no_valid_host_from_nova_waits_pending_then_recovers(bed, engine):
    """The same full cluster with the preflight off: every server is sent,
    Nova's scheduler answers No valid host (the migration in error, the
    server ERROR with that fault); the host waits pending with Nova's
    reason, and the servers, in error now, are rebuilt ACTIVE on the spare
    once it is enabled."""
    host, full, spare = bed.hosts[2], bed.hosts[1], bed.hosts[0]
    ids, filler_id = _fill_cluster(bed, host, full, spare)
    eng = engine({"capacity": {"enabled": False},
                  "evacuation": {"retry_backoff": RETRY_BACKOFF,
                                 "max_attempts": 10}}).start()
    bed.cloud.kill_compute(host)
    reason, waited = _wait_pending(bed, eng, host, ids, "No valid host")
    assert "2 found no host" in reason, reason
    for sid in ids:
        s = bed.cloud.server(sid)
        assert s["OS-EXT-SRV-ATTR:host"] == host, s
        assert s["status"] == "ERROR", s
        assert "No valid host" in s["fault"]["message"], s
    assert {m["status"] for m in bed.cloud.migrations(host)} == {"error"}

    migs = _recovers_on_spare(bed, eng, host, spare, ids)
    # one refused evacuation (error) and one rebuilt (done) per server
    assert sorted((m["instance_uuid"], m["status"]) for m in migs) == sorted(
        [(sid, "error") for sid in ids] + [(sid, "done") for sid in ids]), \
        migs
    assert bed.cloud.server(filler_id)["OS-EXT-SRV-ATTR:host"] == full


# -- 3. a reserved host, brought in and returned ------------------------------

RESERVED_REASON = "reserved: spares"


def test_reserved_host_is_brought_in_and_returned_to_the_reserve(bed,
                                                                 engine):
    """The full cluster again, the empty third compute a reserved host
    (disabled, reason ``reserved: spares``): instanceha enables it itself
    (journalled first), the servers are rebuilt there with no wait. When the
    lost host is back and Nova has cleaned it up, it is re-enabled and the
    reserved host disabled again with the reason it had; the servers stay
    on it."""
    host, full, spare = bed.hosts[1], bed.hosts[0], bed.hosts[2]
    ids, filler_id = _fill_cluster(bed, host, full, spare,
                                   reason=RESERVED_REASON)
    eng = engine({"reserved_hosts": {"enabled": True,
                                     "return_to_reserve": True},
                  "evacuation": {"max_attempts": 10}}).start()
    brought = "reserved host(s) %s in service for it" % spare

    bed.cloud.kill_compute(host)
    state, reason = eng.wait_state(host, "evacuated", timeout=180)
    assert reason.startswith("2/2 servers evacuated") and brought in reason, \
        reason
    # Nova: the reserved host enabled (by instanceha: nothing else touched
    # it), every server ACTIVE there, one evacuation done each.
    svc = bed.cloud.service(spare)
    assert svc["status"] == "enabled" and not svc["forced_down"], svc
    for s in bed.cloud.wait_servers(ids, timeout=90):
        assert s["OS-EXT-SRV-ATTR:host"] == spare, s
    migs = bed.cloud.migrations(host)
    assert sorted((m["instance_uuid"], m["status"], m["dest_compute"])
                  for m in migs) == sorted((sid, "done", spare)
                                           for sid in ids), migs
    svc = bed.cloud.service(host)
    assert svc["forced_down"] and svc["status"] == "disabled", svc
    assert bed.cloud.server(filler_id)["OS-EXT-SRV-ATTR:host"] == full

    with _journal(eng) as j:
        in_use = j.reserved_in_use()
        done = [r for r in j.evacuations() if r["host_name"] == host
                and r["status"] == "done"]
    assert [(r["reserved_host"], r["host_name"], r["original_reason"])
            for r in in_use] == [(spare, host, RESERVED_REASON)], in_use
    assert sorted(r["server_id"] for r in done) == sorted(ids), done
    # written before the enable, so before anything was sent
    assert all(r["requested_at"] >= in_use[0]["taken_at"] for r in done), \
        (in_use, done)
    line = _status_line(_status_cli(eng), host)
    assert "evacuated" in line.split()[:2] and brought in line, line
    text = _status_cli_host(eng, host)
    assert "reserved host %s: in service for it" % spare in text, text

    # The lost host comes back: Nova cleans it up, instanceha puts it back
    # and returns the reserved host to the reserve.
    bed.bmc(host).power_on()
    state, reason = eng.wait_state(host, "active", timeout=180)
    assert "reserved host(s) %s returned to the reserve" % spare in reason, \
        reason
    svc = bed.cloud.service(host)
    assert svc["status"] == "enabled" and not svc["forced_down"], svc
    assert {m["status"] for m in bed.cloud.migrations(host)} == \
        {"completed"}
    svc = bed.cloud.service(spare)
    assert (svc["status"], svc["disabled_reason"]) == (
        "disabled", RESERVED_REASON), svc
    for sid in ids:
        s = bed.cloud.server(sid)
        assert (s["status"], s["OS-EXT-SRV-ATTR:host"]) == ("ACTIVE",
                                                            spare), s
    with _journal(eng) as j:
        assert j.reserved_in_use() == []
        rows = j.reserved_history()
    assert [(r["reserved_host"], r["host_name"]) for r in rows] == [
        (spare, host)], rows
    assert rows[0]["returned_at"] is not None and \
        rows[0]["returned_at"] >= rows[0]["taken_at"], rows
    assert rows[0]["outcome"] == ("returned to the reserve: disabled with "
                                  "reason %r" % RESERVED_REASON), rows
    text = _status_cli_host(eng, host)
    assert "reserved host %s: returned to the reserve" % spare in text, text
