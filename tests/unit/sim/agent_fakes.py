"""Fakes shared by the simulated agents' unit tests: sockets that keep
what is sent, a keyring, decoding."""

import socket

from instanceha.heartbeat import keys
from instanceha.heartbeat import protocol

KEYRING = keys.Keyring(keys.Key.from_secret(b"k" * 32))


class FakeSocket:
    """A UDP socket that records its datagrams and can be given some to
    receive; never touches the network."""

    def __init__(self, family=socket.AF_INET, kind=socket.SOCK_DGRAM,
                 port=40000):
        self.family = family
        self.address = None
        self.sent = []
        self.inbox = []
        self.closed = False
        self._port = port

    def setblocking(self, flag):
        pass

    def bind(self, address):
        self.address = (address[0], address[1] or self._port)

    def getsockname(self):
        return self.address

    def sendto(self, data, destination):
        self.sent.append((data, destination))
        return len(data)

    def recvfrom(self, size):
        if not self.inbox:
            raise BlockingIOError()
        return self.inbox.pop(0)

    def close(self):
        self.closed = True


class SocketFactory:
    def __init__(self):
        self.made = []

    def __call__(self, family, kind):
        sock = FakeSocket(family, kind)
        self.made.append(sock)
        return sock

    def bound(self, address):
        return [s for s in self.made if s.address
                and s.address[0] == address and not s.closed]

    def beats(self, address=None):
        """Every beat sent, decoded, in order (from ``address`` only when
        given)."""
        out = []
        for sock in self.made:
            if address is not None and (not sock.address
                                        or sock.address[0] != address):
                continue
            for data, _ in sock.sent:
                out.append(protocol.decode(data, KEYRING))
        return out
