"""The simulated agents' network: faults per host and path, the shared
path sockets. Fake clock and sockets; no sleep, no network."""

import errno
import socket

import pytest

from instanceha.sim import agent_net
from tests.unit.sim.agent_fakes import SocketFactory

PATHS = {"mgmt": "127.0.0.1", "storage": "127.0.0.2"}
DEST = ("127.0.0.1", 7411)


def network(clock, **kw):
    factory = SocketFactory()
    net = agent_net.Network(PATHS, clock, socket_factory=factory, **kw)
    return net, factory


def sent(factory, address):
    return [d for s in factory.bound(address) for d, _ in s.sent]


def test_faults_most_precise_entry_wins():
    faults = agent_net.Faults()
    assert faults.get("h1", "mgmt") == agent_net.NO_FAULT
    faults.set(loss=0.1)
    faults.set(path="storage", delay=2.0)
    faults.set(host="h1", down=True)
    faults.set(host="h1", path="mgmt", loss=0.5)
    assert faults.get("h2", "mgmt") == agent_net.Fault(loss=0.1)
    assert faults.get("h2", "storage") == agent_net.Fault(delay=2.0)
    assert faults.get("h1", "storage") == agent_net.Fault(down=True)
    assert faults.get("h1", "mgmt") == agent_net.Fault(loss=0.5)
    faults.set(host="h1", path="mgmt", delay=1.0)      # merged
    assert faults.get("h1", "mgmt") == agent_net.Fault(loss=0.5, delay=1.0)
    faults.clear(host="h1")
    assert faults.get("h1", "storage") == agent_net.Fault(delay=2.0)
    faults.clear()
    assert faults.get("h1", "mgmt") == agent_net.NO_FAULT


@pytest.mark.parametrize("kw", [{"loss": 1.5}, {"loss": -0.1},
                                {"delay": -1}])
def test_faults_refuse_nonsense(kw):
    with pytest.raises(ValueError):
        agent_net.Faults().set(**kw)


def test_paths_need_their_own_source_address(clock):
    with pytest.raises(ValueError, match="share the source address"):
        agent_net.Network({"a": "127.0.0.1", "b": "127.0.0.1"}, clock)


def test_path_sockets_share_one_real_socket_per_path(clock):
    net, factory = network(clock)
    net.open()
    socks = [agent_net.PathSocket(net, "h%d" % i, socket.AF_INET)
             for i in range(3)]
    for s in socks:
        s.bind(("127.0.0.2", 0))
        s.sendto(b"beat", DEST)
    assert len(factory.made) == 2
    assert sent(factory, "127.0.0.2") == [b"beat"] * 3
    assert sent(factory, "127.0.0.1") == []
    assert net.counts[("storage", "sent")] == 3


def test_a_path_socket_bound_to_an_unknown_address_fails(clock):
    net, _ = network(clock)
    s = agent_net.PathSocket(net, "h", socket.AF_INET)
    with pytest.raises(OSError) as e:
        s.bind(("192.0.2.1", 0))
    assert e.value.errno == errno.EADDRNOTAVAIL
    with pytest.raises(OSError):
        s.sendto(b"x", DEST)


def test_path_down_fails_like_a_network_down(clock):
    net, factory = network(clock)
    net.faults.set(host="h1", path="mgmt", down=True)
    with pytest.raises(OSError) as e:
        net.send("h1", "mgmt", socket.AF_INET, b"x", DEST)
    assert e.value.errno == errno.ENETUNREACH
    net.send("h1", "storage", socket.AF_INET, b"y", DEST)
    net.send("h2", "mgmt", socket.AF_INET, b"z", DEST)
    assert sent(factory, "127.0.0.1") == [b"z"]
    assert net.counts[("mgmt", "down")] == 1


def test_loss_drops_about_its_share_silently(clock):
    net, factory = network(clock, seed=7)
    net.faults.set(path="mgmt", loss=0.3)
    for _ in range(2000):
        assert net.send("h", "mgmt", socket.AF_INET, b"x", DEST) == 1
        net.send("h", "storage", socket.AF_INET, b"x", DEST)
    lost = net.counts[("mgmt", "lost")]
    assert 500 <= lost <= 700
    assert len(sent(factory, "127.0.0.1")) == 2000 - lost
    assert len(sent(factory, "127.0.0.2")) == 2000


def test_total_loss_sends_nothing(clock):
    net, factory = network(clock)
    net.faults.set(host="h", loss=1.0)
    for _ in range(50):
        net.send("h", "mgmt", socket.AF_INET, b"x", DEST)
    assert sent(factory, "127.0.0.1") == []


def test_delay_holds_datagrams_until_flushed_when_due(clock):
    net, factory = network(clock)
    net.faults.set(host="h", path="mgmt", delay=2.5)
    net.send("h", "mgmt", socket.AF_INET, b"first", DEST)
    clock.advance(1.0)
    net.send("h", "mgmt", socket.AF_INET, b"second", DEST)
    assert net.waiting == 2 and sent(factory, "127.0.0.1") == []
    assert net.flush(clock.t) == clock.t + 1.5
    clock.advance(1.5)
    assert net.flush(clock.t) == clock.t + 1.0
    assert sent(factory, "127.0.0.1") == [b"first"]
    clock.advance(1.0)
    assert net.flush(clock.t) is None
    assert sent(factory, "127.0.0.1") == [b"first", b"second"]
    assert net.counts[("mgmt", "delayed")] == 2
    assert net.counts[("mgmt", "sent")] == 2


def test_close_drops_what_waits_and_closes_the_sockets(clock):
    net, factory = network(clock)
    net.open()
    net.faults.set(delay=1.0)
    net.send("h", "mgmt", socket.AF_INET, b"x", DEST)
    net.close()
    assert net.waiting == 0
    assert all(s.closed for s in factory.made)
