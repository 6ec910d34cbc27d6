"""Faults of the world on the simulator with the real engine: Nova's API
failing a share of calls (refused, applied but answered 500, too slow) and
the journal's database cut off for a while in the middle of a recovery.
Recovery completes, no server is evacuated twice, nothing is lost."""

import collections
import time
import uuid

import pytest
import sqlalchemy as sa

from functional.events_fixtures import missing
from functional.peers.faultproxy import HttpFaultProxy, TcpProxy
from functional import waiting

VICTIM = "compute-2"


def _assert_recovered_once(c, ids):
    snap = c.sim.snapshot()
    for sid in ids:
        s = snap["servers"][sid]
        assert s["host"] != VICTIM and s["status"] == "ACTIVE", s
        assert snap["hosts"][s["host"]]["compute_alive"], s
    per_server = collections.Counter(
        m["instance_uuid"] for m in snap["migrations"]
        if m["source_compute"] == VICTIM)
    # One accepted evacuation per server: no request sent twice.
    assert per_server == {sid: 1 for sid in ids}, per_server
    assert snap["double_rebuilds"] == [], snap["double_rebuilds"]


def _victims(c):
    return sorted(sid for sid, s in c.sim.snapshot()["servers"].items()
                  if s["host"] == VICTIM)


def test_nova_api_failing_a_share_of_calls(make_cloud):
    # A request held past the client's timeout lands 1 s later: it is
    # waited for (unanswered_request_wait) before the server is checked
    # and sent again.
    c = make_cloud({"DEFAULT": {"api_timeout": 2.0},
                    "evacuation": {"unanswered_request_wait": 6.0}},
                   hosts=8, servers_per_host=4)
    # Random faults on every call, and on the few writes for sure: the
    # force-down applied but answered 500, the first evacuation applied
    # but answered 500 (retrying it blindly would rebuild the server
    # twice), the third refused, the fourth answered too late.
    proxy = HttpFaultProxy(c.server.url, prefix="/compute",
                           fail_before=0.15, fail_after=0.10,
                           delay_rate=0.03, delay=3.0, seed=7,
                           script={"PUT": ["fail_after"],
                                   "POST": ["fail_after", "none",
                                            "fail_before", "delay"]})
    try:
        c.compute_through(proxy)
        ids = _victims(c)
        c.start_engine()
        c.sim.kill(VICTIM)
        state, reason = c.wait_state(VICTIM, "evacuated", timeout=240)
        assert "4/4 servers evacuated" in reason, reason
        _assert_recovered_once(c, ids)
        faults = proxy.faults()
        # The faults did happen, on writes too.
        assert faults.get("fail_before", 0) > 0, faults
        assert faults.get("fail_after", 0) > 0, faults
        assert proxy.counts[("POST", "fail_after")] >= 1, proxy.counts
        assert proxy.counts[("PUT", "fail_after")] >= 1, proxy.counts
    finally:
        proxy.close()


@pytest.fixture
def mariadb_journal():
    db = "iha_faults_%s" % uuid.uuid4().hex[:8]
    admin_url = "mysql+pymysql://root@127.0.0.1:3306/"
    try:
        admin = sa.create_engine(admin_url, isolation_level="AUTOCOMMIT")
        with admin.connect() as conn:
            conn.execute(sa.text("CREATE DATABASE %s" % db))
    except Exception as e:
        missing("MariaDB at 127.0.0.1:3306 is needed for this test: %s" % e)
    proxy = TcpProxy("127.0.0.1", 3306)
    yield proxy, "mysql+pymysql://root@127.0.0.1:%d/%s" % (proxy.port, db)
    proxy.close()
    with admin.connect() as conn:
        conn.execute(sa.text("DROP DATABASE %s" % db))
    admin.dispose()


def test_journal_database_cut_off_mid_recovery(make_cloud, mariadb_journal):
    proxy, url = mariadb_journal
    c = make_cloud({"journal": {"connection": url}}, hosts=6,
                   servers_per_host=3)
    c.engine.journal_url = url
    ids = _victims(c)
    c.start_engine()
    c.sim.kill(VICTIM)
    c.wait_state(VICTIM, "suspect", timeout=60)
    proxy.down()
    cut_at = time.time()
    try:
        # While it is down nothing is decided, and status says why.
        waiting.wait_for(lambda: "journal" in (c.status().get("degraded")
                                               or {}), 30,
                         "status to report the journal degraded")
        out = c.cli("status")
        assert "DEGRADED journal: writes failing" in out.stdout, out.stdout
        time.sleep(max(0.0, 8.0 - (time.time() - cut_at)))
        assert c.states()[VICTIM][0] in ("suspect", "fencing"), c.states()
    finally:
        proxy.up()
    state, reason = c.wait_state(VICTIM, "evacuated", timeout=180)
    _assert_recovered_once(c, ids)
    assert not c.status().get("degraded"), c.status().get("degraded")
    # Nothing lost: every step of the recovery is in the journal.
    j = c.journal()
    dsts = [t["dst"] for t in j.transitions() if t["host_name"] == VICTIM]
    for step in ("suspect", "fencing", "fenced", "evacuating", "evacuated"):
        assert step in dsts, dsts
    done = {e["server_id"] for e in j.evacuations() if e["status"] == "done"}
    assert done == set(ids)
    assert proxy.cut > 0


def test_bmc_unreachable_for_a_while_during_fencing(make_cloud):
    """The BMC times out while the host is being fenced, then answers:
    the power-off is retried until it is confirmed, and only then are the
    servers evacuated."""
    c = make_cloud(hosts=6, servers_per_host=2)
    ids = _victims(c)
    c.start_engine()
    c.sim.set_bmc(VICTIM, reachable=False)
    c.sim.kill(VICTIM)
    c.wait_state(VICTIM, "fencing", timeout=60)
    time.sleep(3.0)                     # the BMC stays silent a while
    assert c.sim.snapshot()["migrations"] == []
    c.sim.set_bmc(VICTIM, reachable=True)
    state, reason = c.wait_state(VICTIM, "evacuated", timeout=90)
    assert c.sim.snapshot()["hosts"][VICTIM]["power"] == "off"
    _assert_recovered_once(c, ids)
