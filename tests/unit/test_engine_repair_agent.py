"""Instance repair on a host agent's guest events (issue 25), end to end
without a socket or libvirt: the agent's watcher fed a fake libvirt
lifecycle event -> its signed datagram -> the engine's heartbeat source
-> instance repair's case, and the pass that judges it against Nova's
view (the unit fake of Nova, a fake clock)."""

from structlog.testing import capture_logs

from instanceha import conf as ih_conf
from instanceha.agent import guest_events
from instanceha.heartbeat import guest
from instanceha.policy import instance_repair as ir
from instanceha.sources import heartbeat
from tests.unit.agent import fake_libvirt
from tests.unit.agent.helpers import make_conf
from tests.unit.heartbeat import helpers
from tests.unit.sources.helpers import Sink
from tests.unit.test_engine_repair import SID, _rows, _settle, _world

SENDER = ("192.0.2.10", 40001)


def _agent(host="compute-0", key=helpers.KEYRING):
    sent = []
    lv = fake_libvirt.Module()

    def send(data):
        sent.append(data)
        return 1
    w = guest_events.GuestWatcher(
        make_conf(), key, host, "b1", send, lambda: 1000.0,
        libvirt_module=lv, seq_start=10, spawn=lambda t, n: None)
    return w, lv, sent


def _fire(agent, event, detail, sid=SID):
    w, lv, sent = agent
    w.on_lifecycle(None, fake_libvirt.Dom(sid), getattr(lv, event),
                   getattr(lv, detail), None)
    return sent[-1] if sent else None


def _source(w, guest_sink="repair"):
    conf = ih_conf.make({"agent": {"listen_addresses": ["127.0.0.1:0"]}})
    sink = w.engine.repair.from_agent if guest_sink == "repair" \
        else guest_sink
    src = heartbeat.HeartbeatSource(
        conf, Sink(), w.clock, lambda: w.engine.known_hosts(),
        keyring=helpers.KEYRING, guest_sink=sink)
    src.refresh(w.clock())
    return src


CRASH = ("VIR_DOMAIN_EVENT_CRASHED", "VIR_DOMAIN_EVENT_CRASHED_PANICKED")
FAILED = ("VIR_DOMAIN_EVENT_STOPPED", "VIR_DOMAIN_EVENT_STOPPED_FAILED")


def test_a_crash_seen_by_the_agent_opens_a_case_nova_then_confirms():
    w = _world()
    src = _source(w)
    data = _fire(_agent(), *FAILED)
    src.handle_datagram(data, SENDER, now=w.clock())
    case = w.engine.repair.cases[SID]
    assert (case.source, case.verdict) == ("agent", ir.CRASHED)
    # Nova has not caught up: it shows the server running. The case waits
    # for its view instead of closing; nothing is done meanwhile.
    _settle(w, passes=5)
    assert w.engine.repair.cases[SID].state == "waiting"
    assert _rows(w) == []
    # Nova's power-state sync stops the server: the ladder's start.
    v = w.compute.servers[SID]
    v.update(vm_state="stopped", status="SHUTOFF", power_state=4)
    _settle(w, passes=15)
    assert _rows(w) == [("start", "success")]
    assert v["status"] == "ACTIVE" and w.engine.repair.cases == {}


def test_a_server_nova_keeps_showing_running_is_closed_untouched():
    w = _world()
    src = _source(w)
    src.handle_datagram(_fire(_agent(), *CRASH), SENDER, now=w.clock())
    assert SID in w.engine.repair.cases
    _settle(w, seconds=5.0, passes=10)      # within the agent's grace
    assert SID in w.engine.repair.cases
    _settle(w, seconds=5.0, passes=4)       # past it: Nova's view wins
    assert w.engine.repair.cases == {}
    assert _rows(w) == []
    assert getattr(w.compute, "repair_calls", []) == []


def test_active_with_the_guest_crashed_is_hard_rebooted_after_nova_grace():
    w = _world()
    src = _source(w)
    src.handle_datagram(_fire(_agent(), *CRASH), SENDER, now=w.clock())
    w.compute.servers[SID].update(power_state=6)     # crashed, still ACTIVE
    _settle(w, passes=10)
    assert _rows(w) == []                 # Nova's own stop is waited for
    _settle(w, passes=40)
    assert _rows(w) == [("hard_reboot", "success")]


def test_a_watchdog_pause_is_reported_not_repaired():
    w = _world()
    src = _source(w)
    with capture_logs() as logs:
        src.handle_datagram(_fire(_agent(), "VIR_DOMAIN_EVENT_SUSPENDED",
                                  "VIR_DOMAIN_EVENT_SUSPENDED_WATCHDOG"),
                            SENDER, now=w.clock())
    assert w.engine.repair.cases == {}
    news = [e for e in logs if e["event"] == "instance_repair_news"]
    assert news[0]["verdict"] == ir.HYPERVISOR_PAUSED
    assert news[0]["source"] == "agent"


def test_forged_replayed_unknown_and_unwanted_guest_events_are_dropped():
    w = _world()
    src = _source(w)
    forged = _fire(_agent(key=helpers.keys.Keyring(helpers.OTHER_KEY)),
                   *CRASH)
    unknown = _fire(_agent(host="compute-99"), *CRASH)
    good = _fire(_agent(), *CRASH)
    with capture_logs() as logs:
        src.handle_datagram(forged, SENDER, now=w.clock())
        src.handle_datagram(unknown, SENDER, now=w.clock())
        src.handle_datagram(good, SENDER, now=w.clock())
        w.engine.repair.cases.clear()
        src.handle_datagram(good, SENDER, now=w.clock())    # replayed
    assert w.engine.repair.cases == {}    # only the good one opened one
    drops = src.health()["dropped"]
    assert drops == {"unknown_key": 1, "unknown_host": 1, "replayed": 1}
    reasons = {e.get("reason") for e in logs
               if e["event"] == "agent_datagram_dropped"}
    assert reasons == {"unknown_key", "replayed"}
    assert any(e["event"] == "agent_unknown_host" for e in logs)

    off = _source(w, guest_sink=None)
    off.handle_datagram(_fire(_agent(), *CRASH), SENDER, now=w.clock())
    assert off.health()["dropped"] == {"no_guest_sink": 1}


def test_a_bad_signature_is_dropped_with_its_reason():
    w = _world()
    src = _source(w)
    data = bytearray(_fire(_agent(), *CRASH))
    data[-1] ^= 1
    src.handle_datagram(bytes(data), SENDER, now=w.clock())
    assert src.health()["dropped"] == {"bad_signature": 1}
    assert w.engine.repair.cases == {}


def test_a_malformed_guest_body_is_dropped_as_malformed():
    from tests.unit.heartbeat.test_protocol import sign
    import struct
    w = _world()
    src = _source(w)
    body = struct.pack(">QdBBBBB", 1, 1000.0, 9, 2, 4, 7, 8) + \
        b"compute-0b1" + b"a b!" + b"crashed" + b"panicked"
    src.handle_datagram(sign(body, kind=3), SENDER, now=w.clock())
    assert src.health()["dropped"] == {"malformed": 1}
    assert guest.REPLAY_PATH.startswith("~")


def test_the_service_hands_guest_events_to_instance_repair(tmp_path):
    """As instanceha.service wires it: with instance repair on, the
    heartbeat source's guest events reach engine.repair.from_agent (a
    constructor parameter); with it off, they have nowhere to go."""
    from tests.unit.test_startup import Started
    key = tmp_path / "agent.key"
    helpers.write_key(key)
    agent = {"listen_addresses": ["127.0.0.1:0"], "key_file": str(key)}
    on = Started(tmp_path, {"agent": agent,
                            "instance_repair": {"enabled": True}})
    ev = guest.GuestEvent("compute-0", "b1", "compute-0-vm-0", "stopped",
                          "failed", 1, 1000.0)
    try:
        on.svc.heartbeat._guest_sink(ev, on.clock())
        case = on.svc.engine.repair.cases["compute-0-vm-0"]
        assert (case.source, case.verdict) == ("agent", ir.CRASHED)
    finally:
        on.svc.engine.stop()
    off = Started(tmp_path / "off" if (tmp_path / "off").mkdir() is None
                  else tmp_path, {"agent": agent})
    try:
        assert off.svc.heartbeat._guest_sink is None
    finally:
        off.svc.engine.stop()
