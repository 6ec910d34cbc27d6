"""Instance repair (issue 25) on real Nova 34: the bed's computes run a
fake driver whose guest a test may turn off (novaside/iha_fakevirt.py,
``guest_power_off``); Nova's own power-state sync (every
``SYNC_POWER_STATE`` seconds on the bed) stops the server with its own
context, as it does for a guest that shut down or crashed. The real
``instanceha run`` finds it through Nova's notifications (on the bed's
vhost, with a broker user of the test's own) and its sweep, and starts it
again; a server its user stopped through the API (before the start, and
one while it listens) stays stopped; a server
an admin pushed to ERROR (os-resetState) is hard-rebooted. Asserted
through Nova's API (status, power state, metadata markers, instance
actions) and the engine's journal.
"""

import time
import urllib.parse
import uuid

import pytest

from functional import events_fixtures as fx
from functional.peers import procs

PREFIX = "instanceha:instance_repair."
RUNNING, SHUTDOWN = 1, 4            # nova/compute/power_state.py
REPAIR = {"enabled": True, "sweep_interval": 5, "min_uptime": 2,
          "action_timeout": 60, "hold_percent": 0}


@pytest.fixture
def broker_user(bed):
    """A broker user of the test's own on the bed's vhost (the bed's user
    is 'guest', an ordinary word of the repair log: 'the guest
    crashed')."""
    name = "iha-repair-%s" % uuid.uuid4().hex[:8]
    password = uuid.uuid4().hex
    vhost = bed.cloud.rabbit.vhost
    fx.rabbitmqctl("add_user", name, stdin=password)
    try:
        fx.rabbitmqctl("set_permissions", "-p", vhost, name, ".*", ".*",
                       ".*")
        r = bed.cloud.rabbit
        yield "rabbit://%s:%s@%s:%d/%s" % (
            name, password, r.host, r.port,
            urllib.parse.quote(vhost, safe=""))
    finally:
        fx.rabbitmqctl("delete_user", name, check=False)


def _action(bed, sid, body):
    bed.cloud.call("POST", "/servers/%s/action" % sid, body)


def _actions(bed, sid):
    return bed.cloud.get("/servers/%s/os-instance-actions" % sid,
                         "2.58")["instanceActions"]


def test_a_guest_off_by_itself_is_started_a_users_stop_stays(
        bed, engine, broker_user):
    host = bed.hosts[0]
    ids = bed.cloud.boot(host, 4, name="repair")
    bed.cloud.wait_servers(ids, host=host)
    crashed, users, errored, live = ids
    _action(bed, users, {"os-stop": None})
    bed.cloud.wait_servers([users], status="SHUTOFF", timeout=60)

    eng = engine({"instance_repair": REPAIR,
                  "notifications": {"enabled": True,
                                    "transport_url": broker_user}}).start()
    t0 = time.monotonic()
    bed.cloud.guest_power_off(host, crashed, "crashed")
    # Nova's sync stops it (its own context), instanceha starts it.
    stop = procs.wait_until(
        lambda: next((a for a in _actions(bed, crashed)
                      if a["action"] == "stop"), None), 30,
        "Nova's power-state sync to stop the server", "nova-compute",
        bed.cloud.log_of("nova-compute-%s" % host), interval=0.5)
    assert stop["user_id"] is None, stop
    bed.cloud.wait_servers([crashed], status="ACTIVE", timeout=60)
    took = time.monotonic() - t0
    s = bed.cloud.server(crashed)
    assert s["OS-EXT-STS:power_state"] == RUNNING
    starts = [a for a in _actions(bed, crashed) if a["action"] == "start"]
    assert len(starts) == 1, _actions(bed, crashed)

    def result(sid):
        # The markers are written removals first: the result is the last.
        meta = bed.cloud.server(sid).get("metadata") or {}
        value = meta.get(PREFIX + "result") or ""
        return "success" in value and (value, meta)
    value, meta = procs.wait_until(
        lambda: result(crashed), 30, "the success marker", "instanceha",
        eng.log_path, interval=0.5)
    assert value.startswith("start success"), value
    assert PREFIX + "running" not in meta and PREFIX + "pending" not in meta
    rows = [(r["action"], r["outcome"], r["verdict"])
            for r in eng.journal().repairs(crashed)]
    assert rows == [("start", "success", "crashed")], rows

    # An admin pushes a server to ERROR: hard reboot (start does not
    # apply to a server in ERROR).
    _action(bed, errored, {"os-resetState": {"state": "error"}})
    assert "resetState" in [a["action"] for a in _actions(bed, errored)]

    def active(sid):
        s = bed.cloud.server(sid)
        return (s["status"] == "ACTIVE" and s["OS-EXT-STS:task_state"] is None
                and s)
    # (wait_servers gives up on a server in ERROR: this one starts there)
    procs.wait_until(lambda: active(errored), 60, "the server in ERROR "
                     "ACTIVE again", "instanceha", eng.log_path, interval=0.5)
    reboots = [a for a in _actions(bed, errored) if a["action"] == "reboot"]
    assert len(reboots) == 1, _actions(bed, errored)
    value, _ = procs.wait_until(
        lambda: result(errored), 30, "the success marker", "instanceha",
        eng.log_path, interval=0.5)
    assert value.startswith("hard_reboot success"), value
    rows = [(r["action"], r["outcome"]) for r in
            eng.journal().repairs(errored)]
    assert rows == [("hard_reboot", "success")], rows

    # A user stops a server while instanceha listens: its
    # instance.power_off notifications arrive live, with the user's
    # context.
    _action(bed, live, {"os-stop": None})
    bed.cloud.wait_servers([live], status="SHUTOFF", timeout=60)

    def heard():
        return any("instance_repair_news" in line and live in line
                   and "user_stop" in line
                   for line in eng.log_text().splitlines())
    procs.wait_until(heard, 30, "the user's stop heard in a notification "
                     "and left alone", "instanceha", eng.log_path,
                     interval=0.5)
    # The users' stops (one before the start, one live): two sweeps
    # later both are still stopped, untouched.
    deadline = time.monotonic() + 2 * REPAIR["sweep_interval"] + 2
    while time.monotonic() < deadline:
        for sid in (users, live):
            assert bed.cloud.server(sid)["status"] == "SHUTOFF", sid
        time.sleep(1)
    for sid in (users, live):
        assert [a["action"] for a in _actions(bed, sid)
                if a["action"] != "create"] == ["stop"], sid
        assert eng.journal().repairs(sid) == [], sid
        assert not any(k.startswith(PREFIX) for k in
                       bed.cloud.server(sid).get("metadata") or {}), sid
    status = eng.status()["instance_repair"]
    assert status["open"] == 0, status
    print("guest off -> ACTIVE again on real Nova in %.1f s" % took)
