"""The engine's heartbeat source with each host's own key (issue 34,
part 2): root on host A, holding A's key, cannot keep host B from being
reported silent, nor fake B's guest crashes; the shared key is accepted
and counted while the operator's window is open, dropped once closed."""

from oslo_config import cfg
import pytest
from structlog.testing import capture_logs

from instanceha import conf as ih_conf
from instanceha.conf import heartbeat as heartbeat_conf
from instanceha.events import EventKind
from instanceha.heartbeat import guest
from instanceha.heartbeat import keys
from instanceha.sources import heartbeat
from tests.unit.heartbeat import helpers
from tests.unit.sources.helpers import FakeClock, Sink
from tests.unit.test_heartbeat_source import HOSTS, SENDER, T0, Host

MASTER = keys.Key.from_secret(b"M" * 40)
SHARED = keys.Keyring(helpers.KEY)
A_ADDRESS = ("192.0.2.66", 40001)


def make(shared=SHARED, accept_shared=True, guest_sink=None):
    conf = ih_conf.make({"agent": {"listen_addresses": ["127.0.0.1:0"]}})
    sink = Sink()
    ring = keys.HostKeyring(MASTER, shared=shared,
                            accept_shared=accept_shared)
    src = heartbeat.HeartbeatSource(conf, sink, FakeClock(T0),
                                    lambda: list(HOSTS), keyring=ring,
                                    guest_sink=guest_sink,
                                    sendto=lambda via, data, address: None)
    src.refresh(T0)
    src.challenge(T0)       # a first nonce, for the beats to echo
    Agent.source = src
    return src, sink


class Agent(Host):
    """A host's agent, its beats echoing the engine's newest challenge
    (root on a host receives what is sent to that host: a forger echoes
    them too)."""
    source = None

    def beat(self, at, **kw):
        kw.setdefault("echoes", (Agent.source.challenges.newest,))
        return super().beat(at, **kw)


def own(name):
    return Agent(name, key=keys.derive_host_key(MASTER, name))


def silence_of(src, sink, forger, victim_name, forge=True,
               victim_key=None):
    """compute-1 (the forger's host) and the victim beat each second;
    the victim dies at T0 + 5 while the forger sends a beat naming it
    every second, signed with its key, for 30 s. Returns the time of the
    victim's first AGENT_SILENT (None if never) and whether it was heard
    again after."""
    a = own("compute-1")
    b = own(victim_name) if victim_key is None else Agent(victim_name,
                                                         key=victim_key)
    forged = Agent(victim_name, key=forger.key, boot_id=b.boot_id)
    forged.seq = {"mgmt": 10 ** 9}      # ahead of the real sequence
    silent_at, again = None, False
    for i in range(60):
        now = T0 + i * 0.5
        if i % 4 == 0:
            src.challenge(now)
        if i % 2 == 0:
            src.handle_datagram(a.beat(now), A_ADDRESS, now=now)
            if now < T0 + 5:
                src.handle_datagram(b.beat(now), SENDER, now=now)
            elif forge:
                src.handle_datagram(forged.beat(now), A_ADDRESS, now=now)
        src.check(now)
    for event in sink.events:
        if event.name != victim_name:
            continue
        if event.kind == EventKind.AGENT_SILENT and silent_at is None:
            silent_at = event.at
        elif silent_at is not None:
            again = True
    return silent_at, again


def test_host_a_cannot_keep_dead_host_b_beating():
    """B's death is reported on time (its silence timeout after its last
    beat) although A sends a forged beat naming B every second; each
    forged beat is dropped and counted as wrong_host."""
    src, sink = make()
    with capture_logs() as logs:
        at, again = silence_of(src, sink, own("compute-1"), "compute-2")
    timeout = src._group.silence_timeout
    assert at is not None and at - (T0 + 4) <= timeout + 0.5 and not again
    # The same moment as with no forgery at all.
    assert (at, False) == silence_of(*make(), own("compute-1"), "compute-2",
                                     forge=False)
    health = src.health()
    assert health["dropped"] == {"wrong_host": 25}     # T0+5 .. T0+29
    assert src.heard("compute-2", now=T0 + 29.5) is None
    assert src.heard("compute-1", now=T0 + 29.5) is not None
    drop, = [e for e in logs if e["event"] == "agent_datagram_dropped"]
    assert drop["reason"] == "wrong_host" and drop["address"] == \
        A_ADDRESS[0]


def test_with_the_shared_key_host_a_could_keep_b_beating():
    """What per-host keys close: A holding the shared key keeps dead B,
    on the shared key too, beating for as long as it likes (the window's
    risk for hosts not moved yet, doc/agent.md)."""
    src, sink = make()
    forger = Agent("compute-1", key=helpers.KEY)
    assert silence_of(src, sink, forger, "compute-2",
                      victim_key=helpers.KEY) == (None, False)


def test_host_a_cannot_fake_a_guest_crash_on_host_b():
    got = []
    src, _ = make(guest_sink=lambda ev, now: got.append(ev))
    a_key = keys.derive_host_key(MASTER, "compute-1")
    for host, key in (("compute-2", a_key), ("compute-1", a_key)):
        data = guest.encode(guest.GuestEvent(
            host, "b1", "srv-1", "crashed", "panicked", 5, T0), key)
        src.handle_datagram(data, A_ADDRESS, now=T0)
    assert [ev.host for ev in got] == ["compute-1"]
    assert src.health()["dropped"] == {"wrong_host": 1}


def test_shared_key_beats_are_accepted_counted_and_logged_in_the_window():
    src, sink = make(accept_shared=True)
    old = Agent("compute-3", key=helpers.KEY)
    with capture_logs() as logs:
        for i in range(3):
            src.handle_datagram(old.beat(T0 + i), SENDER, now=T0 + i)
        src.handle_datagram(own("compute-4").beat(T0 + 2), SENDER,
                            now=T0 + 2)
    health = src.health()
    assert (health["hosts_on_shared_key"], health["shared_key_beats"],
            health["accept_shared_key"]) == (1, 3, True)
    assert health["master_key_ids"] == [MASTER.kid]
    used = [e for e in logs if e["event"] == "agent_shared_key_used"]
    assert [e["host"] for e in used] == ["compute-3"]       # once
    view = src.view(now=T0 + 2)
    assert view["compute-3"]["shared_key"] and \
        not view["compute-4"]["shared_key"]
    # The host moves to its own key: no longer counted.
    moved = own("compute-3")
    moved.seq = dict(old.seq)
    src.handle_datagram(moved.beat(T0 + 3), SENDER, now=T0 + 3)
    assert src.health()["hosts_on_shared_key"] == 0


def test_a_host_on_its_own_key_is_no_longer_spoken_for_by_the_shared_key():
    """Within the window: once compute-3 beats on its own key, whoever
    holds the shared key (root on a host not yet moved) cannot forge its
    beats or guest events; compute-4, not moved, still beats on it."""
    got = []
    src, _ = make(guest_sink=lambda ev, now: got.append(ev))
    moved, old = own("compute-3"), Agent("compute-4", key=helpers.KEY)
    src.handle_datagram(moved.beat(T0), SENDER, now=T0)
    src.handle_datagram(old.beat(T0), SENDER, now=T0)
    forged = Agent("compute-3", key=helpers.KEY)
    forged.seq = {"mgmt": 10 ** 9}
    with capture_logs() as logs:
        src.handle_datagram(forged.beat(T0 + 1), A_ADDRESS, now=T0 + 1)
        src.handle_datagram(guest.encode(guest.GuestEvent(
            "compute-3", "b1", "srv-1", "crashed", "panicked", 5, T0),
            helpers.KEY), A_ADDRESS, now=T0 + 1)
    assert got == [] and src.health()["dropped"] == {"shared_key": 2}
    drop, = [e for e in logs if e["event"] == "agent_datagram_dropped"]
    assert "signs with its own key" in drop["detail"]
    assert src.handle_datagram(old.beat(T0 + 1), SENDER,
                               now=T0 + 1) is None
    assert src.health()["accepted"] == 3


def test_shared_key_beats_are_dropped_with_a_clear_reason_once_closed():
    src, sink = make(accept_shared=False)
    with capture_logs() as logs:
        event = src.handle_datagram(Agent("compute-3", key=helpers.KEY)
                                    .beat(T0), SENDER, now=T0)
    assert event is None and sink.events == []
    assert src.health()["dropped"] == {"shared_key": 1}
    drop, = [e for e in logs if e["event"] == "agent_datagram_dropped"]
    assert drop["reason"] == "shared_key"
    assert "accept_shared_key is false" in drop["detail"]
    # Its own key: accepted.
    assert src.handle_datagram(own("compute-3").beat(T0), SENDER,
                               now=T0).kind == EventKind.AGENT_BEATING


def test_a_new_host_gets_its_key_when_nova_lists_it():
    hosts = list(HOSTS)
    conf = ih_conf.make({"agent": {"listen_addresses": ["127.0.0.1:0"]}})
    src = heartbeat.HeartbeatSource(
        conf, Sink(), FakeClock(T0), lambda: list(hosts),
        keyring=keys.HostKeyring(MASTER),
        sendto=lambda via, data, address: None)
    src.refresh(T0)
    src.challenge(T0)
    Agent.source = src
    new = own("compute-new")
    assert src.handle_datagram(new.beat(T0), SENDER, now=T0) is None
    assert src.health()["dropped"] == {"unknown_key": 1}
    hosts.append(("id-new", "compute-new"))
    src.check(T0 + 1)
    assert src.handle_datagram(new.beat(T0 + 1), SENDER,
                               now=T0 + 1).host == "id-new"


def test_requests_are_signed_with_the_host_key_its_agent_holds():
    src, _ = make()
    sent = []
    for name, host in (("compute-1", own("compute-1")),
                       ("compute-2", Agent("compute-2", key=helpers.KEY))):
        src.handle_datagram(host.beat(T0), ("127.0.0.1", 1), now=T0)
        sent.append(src.keyring.signing_key(name,
                                            src._table.kid(name)))
    assert sent[0].host == "compute-1" and sent[0].kid == \
        keys.derive_host_key(MASTER, "compute-1").kid
    assert sent[1] is helpers.KEY


# -- the options ------------------------------------------------------------

def conf_with(**agent):
    agent.setdefault("listen_addresses", ["127.0.0.1:0"])
    return ih_conf.make({"agent": agent})


def test_the_master_and_shared_key_files_are_read(tmp_path):
    master = helpers.write_key(tmp_path / "master.key", b"M" * 40)
    shared = helpers.write_key(tmp_path / "agent.key")
    src = heartbeat.HeartbeatSource(
        conf_with(master_key_file=str(master), key_file=str(shared),
                  accept_shared_key=False), Sink(),
        known_hosts=lambda: list(HOSTS))
    src.refresh(T0)
    ring = src.keyring
    assert (ring.master_kids, ring.kids, len(ring)) == (
        (MASTER.kid,), (), len(HOSTS))
    assert src.health()["accept_shared_key"] is False
    # Master only: no shared key at all.
    src = heartbeat.HeartbeatSource(conf_with(master_key_file=str(master)),
                                    Sink())
    assert src.keyring.per_host and src.keyring.kids == ()
    with capture_logs() as logs:
        src.start()
        src.stop()
    assert src.health()["accept_shared_key"] is False
    assert not [e for e in logs if "shared_key" in e["event"]]


@pytest.mark.parametrize("agent,message", [
    ({"accept_shared_key": False, "key_file": "/k"},
     "accept_shared_key = false needs"),
    ({"previous_master_key_file": "/p", "key_file": "/k"},
     "previous_master_key_file needs"),
    ({"master_key_file": "/m", "previous_key_file": "/p"},
     "previous_key_file needs"),
])
def test_validate_names_the_key_options(agent, message):
    with pytest.raises(cfg.Error, match=message):
        heartbeat_conf.validate(conf_with(**agent))


def test_validate_passes_with_a_master_key_only():
    heartbeat_conf.validate(conf_with(master_key_file="/m",
                                      accept_shared_key=False))
