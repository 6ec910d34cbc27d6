"""The agent's guest-event watcher, with a fake libvirt module: which
lifecycle events leave as signed guest-event datagrams, and what they
carry."""

import threading

from instanceha.agent import guest_events
from instanceha.agent import main as agent_main
from instanceha.heartbeat import guest
from instanceha.heartbeat import protocol
from tests.unit.agent import fake_libvirt
from tests.unit.agent.helpers import make_conf
from tests.unit.heartbeat import helpers

SID = "6f1c1a2e-3b4d-4e5f-8a9b-0c1d2e3f4a5b"


def watcher(lv=None, **conf):
    lv = lv or fake_libvirt.Module()
    sent = []

    def send(data):
        sent.append(data)
        return 1
    w = guest_events.GuestWatcher(
        make_conf(**conf), helpers.KEYRING, "compute-1", "b1", send,
        lambda: 1000.0, libvirt_module=lv, seq_start=100,
        spawn=lambda target, name: None)
    return w, lv, sent


def fire(w, lv, event, detail, sid=SID):
    w.on_lifecycle(None, fake_libvirt.Dom(sid), getattr(lv, event),
                   getattr(lv, detail), None)


def test_events_of_a_guest_that_broke_by_itself_are_sent_signed():
    w, lv, sent = watcher()
    for event, detail in (("STOPPED", "STOPPED_FAILED"),
                          ("STOPPED", "STOPPED_CRASHED"),
                          ("CRASHED", "CRASHED_PANICKED"),
                          ("SUSPENDED", "SUSPENDED_WATCHDOG"),
                          ("SUSPENDED", "SUSPENDED_IOERROR")):
        fire(w, lv, "VIR_DOMAIN_EVENT_" + event, "VIR_DOMAIN_EVENT_" + detail)
    w.on_lifecycle(None, fake_libvirt.Dom(SID), lv.VIR_DOMAIN_EVENT_CRASHED,
                   99, None)      # a crash detail of a newer libvirt
    got = [guest.decode(d, helpers.KEYRING) for d in sent]
    assert [(g.event, g.detail) for g in got] == [
        ("stopped", "failed"), ("stopped", "crashed"),
        ("crashed", "panicked"), ("suspended", "watchdog"),
        ("suspended", "ioerror"), ("crashed", "unknown")]
    assert {(g.host, g.boot_id, g.server, g.sent_at) for g in got} == {
        ("compute-1", "b1", SID, 1000.0)}
    assert [g.seq for g in got] == [101, 102, 103, 104, 105, 106]
    assert w.sent == 6 and w.ignored == 0


def test_a_shutdown_a_destroy_a_start_a_resume_or_a_pause_send_nothing():
    w, lv, sent = watcher()
    for event, detail in (("STOPPED", "STOPPED_SHUTDOWN"),
                          ("STOPPED", "STOPPED_DESTROYED"),
                          ("SUSPENDED", "SUSPENDED_PAUSED")):
        fire(w, lv, "VIR_DOMAIN_EVENT_" + event, "VIR_DOMAIN_EVENT_" + detail)
    w.on_lifecycle(None, fake_libvirt.Dom(SID), lv.VIR_DOMAIN_EVENT_STARTED,
                   0, None)
    w.on_lifecycle(None, fake_libvirt.Dom(SID), lv.VIR_DOMAIN_EVENT_RESUMED,
                   0, None)
    assert sent == [] and w.ignored == 5


def test_start_registers_for_lifecycle_events_read_only():
    w, lv, _ = watcher(libvirt_uri="test:///default")
    assert w.start(threading.Event()) is True
    assert lv.loop_registered == 1
    (conn,) = lv.opened
    assert conn.uri == "test:///default"
    assert conn.callbacks == [(lv.VIR_DOMAIN_EVENT_ID_LIFECYCLE,
                               w.on_lifecycle)]
    assert w.check() is True and len(lv.opened) == 1
    conn.alive = False           # libvirtd restarted: registered again
    assert w.check() is True and len(lv.opened) == 2


def test_libvirt_down_at_start_is_retried_by_the_check():
    lv = fake_libvirt.Module()
    lv.fail = RuntimeError("Failed to connect socket")
    w, _, _ = watcher(lv)
    assert w.start(threading.Event()) is True
    assert w.check() is False and lv.opened == []
    lv.fail = None
    assert w.check() is True and len(lv.opened) == 1


def test_without_libvirt_nothing_is_watched():
    w = guest_events.GuestWatcher(
        make_conf(), helpers.KEYRING, "compute-1", "b1", lambda d: 0,
        lambda: 1000.0, libvirt_module=None, seq_start=1,
        spawn=lambda target, name: None)
    assert w.available is False
    assert w.start(threading.Event()) is False


def test_a_failing_send_never_reaches_libvirt():
    w, lv, _ = watcher()

    def broken(data):
        raise OSError("network unreachable")
    w._send = broken
    fire(w, lv, "VIR_DOMAIN_EVENT_CRASHED",
         "VIR_DOMAIN_EVENT_CRASHED_PANICKED")     # logged, not raised
    assert w.sent == 0


def test_the_agent_builds_a_watcher_unless_turned_off(tmp_path):
    lv = fake_libvirt.Module()
    kw = dict(host="compute-1", boot_id="b1", seq_start=1,
              socket_factory=lambda f, t: _Sock(), libvirt_module=lv)
    on = agent_main.Agent(make_conf(), helpers.KEYRING, **kw)
    assert isinstance(on.guests, guest_events.GuestWatcher)
    off = agent_main.Agent(make_conf(guest_events=False), helpers.KEYRING,
                           **kw)
    assert off.guests is None


class _Sock:
    def __init__(self):
        self.sent = []

    def setblocking(self, flag):
        pass

    def sendto(self, data, address):
        self.sent.append((data, address))

    def close(self):
        pass


def test_guest_event_round_trip_and_refusals():
    ev = guest.GuestEvent("compute-1", "b1", SID, "crashed", "panicked", 7,
                          12.5)
    assert guest.decode(guest.encode(ev, helpers.KEY),
                           helpers.KEYRING) == ev
    # Only the engine's receiver reads them: an agent's decoder does not.
    try:
        protocol.decode(guest.encode(ev, helpers.KEY), helpers.KEYRING)
    except protocol.Dropped as d:
        assert (d.reason, d.detail) == ("malformed", "unknown type 3")
    else:
        raise AssertionError("a guest event decoded as a beat or request")
    for bad in (dict(server="a b"), dict(event="Crashed"),
                dict(detail=""), dict(host="")):
        try:
            guest.encode(ev._replace(**bad), helpers.KEY)
        except ValueError:
            continue
        raise AssertionError("encoded %r" % (bad,))
