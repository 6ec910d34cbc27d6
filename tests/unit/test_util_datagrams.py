"""util.datagrams: drain hands every waiting datagram over, reports a
handler's error without ending the drain, a socket error ending it,
stops at the limit; receive reads a batch."""

import socket

from instanceha.util import datagrams


class Sock:
    """recvfrom from a list: a datagram (bytes), or an exception to
    raise; BlockingIOError once the list is empty."""

    def __init__(self, *items):
        self.items = list(items)
        self.sizes = []

    def recvfrom(self, size):
        self.sizes.append(size)
        if not self.items:
            raise BlockingIOError()
        item = self.items.pop(0)
        if isinstance(item, BaseException):
            raise item
        return item, ("192.0.2.1", 4000)


def run(sock, handle=None, limit=None):
    got, failures = [], []
    count = datagrams.drain(
        sock, 99, handle or (lambda data, sender: got.append(
            (data, sender))),
        lambda stage, exc: failures.append((stage, type(exc))), limit)
    return count, got, failures


def test_every_waiting_datagram_is_handed_over_then_the_drain_ends():
    sock = Sock(b"a", b"b", b"c")
    count, got, failures = run(sock)
    assert count == 3 and failures == []
    assert got == [(d, ("192.0.2.1", 4000)) for d in (b"a", b"b", b"c")]
    assert sock.sizes == [99] * 4


def test_an_interrupted_read_ends_the_drain_quietly():
    count, got, failures = run(Sock(b"a", InterruptedError(), b"b"))
    assert (count, [d for d, _ in got], failures) == (1, [b"a"], [])


def test_a_handler_error_is_reported_and_the_drain_goes_on():
    seen = []

    def handle(data, sender):
        seen.append(data)
        if data == b"bad":
            raise ValueError("no")
    count, _, failures = run(Sock(b"bad", b"good"), handle)
    assert (count, seen) == (2, [b"bad", b"good"])
    assert failures == [(datagrams.HANDLE, ValueError)]


def test_a_socket_error_is_reported_and_ends_the_drain():
    sock = Sock(b"a", ConnectionRefusedError(), b"b")
    count, got, failures = run(sock)
    assert count == 1 and [d for d, _ in got] == [b"a"]
    assert failures == [(datagrams.RECEIVE, ConnectionRefusedError)]
    assert sock.items == [b"b"]


def test_at_most_limit_datagrams_are_read():
    sock = Sock(b"a", b"b", b"c")
    assert run(sock, limit=2)[0] == 2
    assert sock.items == [b"c"]


def test_a_real_socket_is_drained():
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as rx, \
            socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as tx:
        rx.bind(("127.0.0.1", 0))
        rx.setblocking(False)
        for data in (b"one", b"two"):
            tx.sendto(data, rx.getsockname())
        got = []
        # Loopback delivery is synchronous: both are queued already.
        datagrams.drain(rx, 64, lambda d, s: got.append(d),
                        lambda stage, exc: None)
        assert got == [b"one", b"two"]


def test_receive_reads_a_batch_without_handling_it():
    failures = []
    sock = Sock(b"a", b"b", OSError("gone"), b"c")
    batch = datagrams.receive(sock, 99,
                              lambda stage, exc: failures.append(stage), 10)
    assert [d for d, _ in batch] == [b"a", b"b"]
    assert failures == [datagrams.RECEIVE] and sock.items == [b"c"]
    assert datagrams.receive(Sock(b"x", b"y", b"z"), 99, None, 2) == [
        (b"x", ("192.0.2.1", 4000)), (b"y", ("192.0.2.1", 4000))]
