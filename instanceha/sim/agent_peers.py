"""The simulated agents' peer network (issue 37, section 2): each host's
real :class:`instanceha.agent.peers.Peers` is given a :class:`PeerSocket`
whose ``sendto`` queues the datagram for the host the address names;
:meth:`PeerNet.deliver` (the agents' thread) hands each to that host's
``Peers.handle``, in order, until none is left (an answer to a probe is
delivered in the same round).

Addresses are ``(host name, index)`` tuples: no real socket, so
thousands of hosts cost no file descriptor. A datagram is lost when
either end's host runs no agent with peers (down, hung, no watchdog), or
when the faults of either end on the peers' path drop it (a path down,
a loss: :class:`instanceha.sim.agent_net.Faults`; a delay is not
applied to peer datagrams).

Peer lists: :func:`ring` gives each host the next ``count`` hosts in
order (a static, deterministic set, as an operator would list a rack's).
"""

import collections
import errno

import structlog

LOG = structlog.get_logger("instanceha.sim.agent_peers")


def ring(names, count):
    """{name: [the ``count`` hosts after it, in order, wrapping]}."""
    names = list(names)
    count = max(0, min(int(count), len(names) - 1))
    return {n: [names[(i + k) % len(names)] for k in range(1, count + 1)]
            for i, n in enumerate(names)}


def address(name, index):
    return (name, index)


class PeerNet:
    """See the module's text. ``peers_of(name)``: the host's running
    :class:`~instanceha.agent.peers.Peers` or None; ``network``: the
    agents' :class:`~instanceha.sim.agent_net.Network` (its faults and
    random source); ``path``: the path name the peers talk over."""

    def __init__(self, peers_of, network, path):
        self._peers_of = peers_of
        self._network = network
        self.path = path
        self._queue = collections.deque()
        #: outcome -> datagrams: delivered, no_agent, down, lost
        self.counts = collections.Counter()

    def socket(self, host):
        return PeerSocket(self, host)

    def send(self, source, data, destination):
        self._queue.append((source, destination[0], bytes(data)))

    def _passes(self, host, direction):
        fault = self._network.faults.get(host, self.path)
        if fault.down:
            self.counts["down"] += 1
            return False
        if fault.loss and self._network._random.random() < fault.loss:
            self.counts["lost_" + direction] += 1
            return False
        return True

    def deliver(self, limit=100000):
        """Deliver what is queued (and what that makes the receivers
        send) ; returns the number delivered."""
        done = 0
        queue = self._queue
        while queue and done < limit:
            source, target, data = queue.popleft()
            receiver = self._peers_of(target)
            if receiver is None or self._peers_of(source) is None:
                self.counts["no_agent"] += 1
                continue
            if not self._passes(source, "out") or \
                    not self._passes(target, "in"):
                continue
            try:
                receiver.handle(data, address(source, 0))
            except Exception:
                LOG.exception("sim.peer_datagram_failed", source=source,
                              target=target)
            self.counts["delivered"] += 1
            done += 1
        return done

    def clear(self):
        self._queue.clear()


class PeerSocket:
    """What one host's Peers takes for its socket."""

    def __init__(self, net, host):
        self._net = net
        self._host = host
        self.closed = False

    def setblocking(self, flag):
        pass

    def sendto(self, data, destination):
        if self.closed:
            raise OSError(errno.EBADF, "simulated peer socket closed")
        fault = self._net._network.faults.get(self._host, self._net.path)
        if fault.down:
            raise OSError(errno.ENETUNREACH, "Network is unreachable "
                          "(simulated: path %s down)" % self._net.path)
        self._net.send(self._host, data, destination)
        return len(data)

    def close(self):
        self.closed = True
