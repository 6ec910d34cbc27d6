"""The simulated agents' request socket: one dispatcher for every host.

An engine sends a soft-fencing request (a signed
:class:`~instanceha.heartbeat.protocol.Request`) to the address a host's
beats come from, at its request port. In the simulator every host beats
from the same loopback addresses (one per path), so every host's
requests arrive at the same (address, port): one UDP socket per path
address, bound here, and the dispatcher hands each datagram to the real
:class:`instanceha.agent.control.Control` of the host the request names.
That Control checks everything a real agent checks (signature, host,
kind, replay window by the host's clock, restart_compute, busy, rate
limit) and runs its restart through the simulator
(``SimCloud.restart_compute``).

What the dispatcher itself drops, counted in :attr:`counts` by reason:
a datagram that does not decode (the protocol's reasons: a real agent
would drop it too), one that is not a request (``not_a_request``), and
one for a host whose agent does not run now (``no_agent``: the host is
off, hung, or its agent stopped; in life no one would be listening).
The dispatcher verifies the signature to find the host; the Control
verifies it again (requests are rare: the cost does not matter).
"""

import collections
import socket

import structlog

from instanceha.heartbeat import protocol
from instanceha.util import datagrams

LOG = structlog.get_logger("instanceha.sim.agent_requests")


def _receive_failed(stage, exc):
    if stage == datagrams.RECEIVE:
        LOG.warning("sim.agent_request_receive_failed", error=str(exc))
    else:
        LOG.exception("sim.agent_request_failed")


class Dispatcher:
    """Routes requests to hosts' Controls. ``lookup(host)`` returns the
    Control of ``host``'s running agent, or None; ``addresses`` are the
    (address, port) pairs to bind (port 0: a free one, the same for
    every address when possible)."""

    def __init__(self, keyring, lookup, addresses,
                 socket_factory=socket.socket):
        self.keyring = keyring
        self._lookup = lookup
        self._addresses = list(addresses)
        self._socket_factory = socket_factory
        self.sockets = []
        self.counts = collections.Counter()

    def open(self):
        """Bind every address; return the bound (address, port) pairs.
        With port 0, the first address picks a free port and the others
        take the same one (the engine sends to one request port)."""
        port = None
        try:
            for address, wanted in self._addresses:
                family = socket.AF_INET6 if ":" in address \
                    else socket.AF_INET
                sock = self._socket_factory(family, socket.SOCK_DGRAM)
                self.sockets.append(sock)
                sock.setblocking(False)
                sock.bind((address, wanted or port or 0))
                port = port or sock.getsockname()[1]
        except OSError:
            self.close()
            raise
        return self.addresses

    @property
    def addresses(self):
        return [s.getsockname()[:2] for s in self.sockets]

    def dispatch(self, data, source=None):
        """Judge one datagram; return the outcome: the host's Control's
        (``accepted`` or why it refused), or the dispatcher's reason."""
        try:
            msg = protocol.decode(data, self.keyring)
        except protocol.Dropped as e:
            return self._count(e.reason, source)
        if not isinstance(msg, protocol.Request):
            return self._count("not_a_request", source)
        control = self._lookup(msg.host)
        if control is None:
            return self._count("no_agent", source, msg.host)
        outcome = control.handle(data, source)
        self.counts[outcome] += 1
        return outcome

    def _count(self, reason, source, host=None):
        self.counts[reason] += 1
        LOG.debug("sim.agent_request_dropped", reason=reason,
                  target=host, source=source)
        return reason

    def drain(self, sock):
        """Handle every datagram waiting on ``sock``."""
        datagrams.drain(sock, protocol.MAX_SIZE + 1, self._received,
                        _receive_failed)

    def _received(self, data, sender):
        self.dispatch(data, "%s:%s" % sender[:2])

    def close(self):
        for sock in self.sockets:
            sock.close()
        self.sockets = []
