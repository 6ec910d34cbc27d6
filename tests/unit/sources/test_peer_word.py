"""The peers' word on a silent host in the engine's host table (issue 37,
section 1): which agents list the host as a peer and, of those beating,
whose report's hearing window began after the host's last beat, who do
not hear it and who do. The counts travel in AGENT_SILENT (then in
AGENT_PEERS whenever they change within the silence); the state
machine fences at once on a majority. Times are given; nothing sleeps."""

from instanceha.events import EventKind as E
from instanceha.fsm import machine
from instanceha.fsm.states import State as S
from instanceha.heartbeat import protocol
from instanceha.sources.heartbeat_table import HostTable
from tests.unit.heartbeat import helpers as hb

TIMEOUT = 3.0
WINDOW = 3.0
H = "compute-h"
PEERS = ["compute-a", "compute-b", "compute-c", "compute-d"]
ADDRESS = ("192.0.2.9", 40000)


def report(peers, heard, window=WINDOW):
    return protocol.WatchdogReport(
        protocol.WATCHDOG_NONE, 0, 20.0, b"n" * 16,
        tuple(protocol.name_digest(p) for p in peers), (),
        tuple(p in heard for p in peers), window)


class Cloud:
    def __init__(self):
        self.table = HostTable(TIMEOUT)
        self.seq = 0

    def beat(self, host, now, watchdog=None):
        self.seq += 1
        return self.table.beat(
            hb.beat(host=host, seq=self.seq, sent_at=now,
                    watchdog=watchdog), "kid", "id-" + host, ADDRESS, now)

    def peers_say(self, now, heard=(), who=PEERS, window=WINDOW):
        """Each of ``who`` beats, listing H (and one other) as peers;
        those in ``heard`` hear H."""
        for p in who:
            self.beat(p, now, report([H, "compute-z"],
                                     {H} if p in heard else set(), window))

    def silent(self, now):
        return [e for e in self.table.check(now)
                if e.kind in (E.AGENT_SILENT, E.AGENT_PEERS)
                and e.name == H]


def cloud_with_h_silent_since(last):
    c = Cloud()
    for t in range(0, int(last) + 1):
        c.beat(H, float(t))
        c.peers_say(float(t), heard=PEERS)
    return c


def test_the_first_silent_event_carries_a_majority_not_hearing_it():
    c = cloud_with_h_silent_since(5)
    c.peers_say(8.2, heard=())          # windows from 5.2: after 5
    [ev] = c.silent(8.5)
    word = ev.payload
    assert (word.peers_unheard, word.peers_heard, word.peers_watching) == \
        (4, 0, 4)
    assert word.last_beat_at == 5.0
    assert "4 report they do not hear it" in ev.reason
    # and the state machine fences at once on it
    p = machine.Policy(grace_period=10, peer_witnesses=2, peer_grace=2)
    rec = machine.HostRecord(id="id-" + H, name=H)
    rec, _ = machine.step(rec, ev, p)
    assert rec.state is S.SUSPECT
    tick = ev.__class__(E.TICK, rec.id, 8.6, source="timer",
                        cluster_ok=True)
    rec, actions = machine.step(rec, tick, p)
    assert rec.state is S.FENCING


def test_reports_whose_window_reaches_back_before_its_last_beat_are_stale():
    c = cloud_with_h_silent_since(5)
    # 7.5 - 3 = 4.5 <= 5: these may speak of probes sent while H beat
    c.peers_say(7.5, heard=())
    [ev] = c.silent(8.1)
    assert (ev.payload.peers_unheard, ev.payload.peers_heard,
            ev.payload.peers_watching) == (0, 0, 4)
    # their next reports are fresh: the word changes, said again
    c.peers_say(8.4, heard=())
    [ev] = c.silent(8.5)
    assert ev.kind is E.AGENT_PEERS and ev.payload.peers_unheard == 4
    assert ev.payload.last_beat_at == 5.0
    assert c.silent(8.6) == []           # unchanged: not said again


def test_a_silent_peers_report_is_not_counted():
    c = cloud_with_h_silent_since(5)
    c.peers_say(8.2, heard=())
    # b, c, d fall silent too (a rack's switch): only a's word is fresh
    c.peers_say(11.0, heard=(), who=["compute-a"])
    c.silent(8.5)
    assert c.table.peer_word(H, 11.5) == (1, 0, 4)


def test_a_minority_and_a_peer_hearing_it_are_counted_as_said():
    c = cloud_with_h_silent_since(5)
    c.peers_say(8.2, heard=("compute-a", "compute-b", "compute-c"))
    [ev] = c.silent(8.5)
    assert (ev.payload.peers_unheard, ev.payload.peers_heard) == (1, 3)
    c.peers_say(9.2, heard=("compute-a",))
    [ev] = c.silent(9.5)
    assert (ev.payload.peers_unheard, ev.payload.peers_heard) == (3, 1)


def test_no_word_without_hearing_reports():
    c = Cloud()
    for t in range(6):
        c.beat(H, float(t))
        for p in PEERS:      # agents without peers (or older ones)
            c.beat(p, float(t))
    for p in PEERS:
        c.beat(p, 8.2)
    [ev] = c.silent(8.5)
    assert (ev.payload.peers_unheard, ev.payload.peers_watching) == (0, 0)


def test_a_peer_that_stops_listing_the_host_no_longer_watches_it():
    c = cloud_with_h_silent_since(5)
    for p in PEERS:
        c.beat(p, 8.2, report(["compute-z"], set()))
    [ev] = c.silent(8.5)
    assert ev.payload.peers_watching == 0
    assert c.table.peer_word(H, 8.5) == (0, 0, 0)


def test_the_view_shows_the_peers_word_of_a_silent_host():
    c = cloud_with_h_silent_since(5)
    c.peers_say(8.2, heard=())
    view = c.table.view(8.5)
    assert view[H]["peers"] == {"watching": 4, "unheard": 4, "heard": 0}
    assert "peers" not in view["compute-a"]
