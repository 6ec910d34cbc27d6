"""The simulated agents' network: faults per host and path (loss, delay,
a path down) and the sockets the real agent's Sender is given.

The real :class:`instanceha.agent.sender.Sender` opens, per path, a
socket per engine address family through its ``socket_factory``, binds
it to the path's local address and ``sendto``\\ s each beat. In the
simulator every host's Sender gets a :class:`PathSocket` instead: its
``bind`` names the path (each path has its own loopback source address,
see :class:`Network`), its ``sendto`` applies the host's faults on that
path and then sends through one real UDP socket per source address,
shared by all hosts (thousands of hosts cannot hold two sockets each:
the process's file limit). A datagram therefore leaves from the path's
address, as a real agent's would, and the engine sees each path's beats
come from their own address.

Faults, as in life:

* ``loss``: each datagram is dropped with this probability, silently;
* ``delay``: each datagram leaves this many seconds later (queued here,
  sent by the agents' thread: :meth:`Network.flush`);
* ``down``: the path's network is down: ``sendto`` fails with
  ENETUNREACH, which the real Sender counts and logs (``agent.path_failing``).

Nothing here takes a lock: one thread (the agents' scheduler) sends.
"""

import collections
import dataclasses
import errno
import heapq
import itertools
import random
import socket

import structlog

LOG = structlog.get_logger("instanceha.sim.agent_net")

ANY = "*"


@dataclasses.dataclass(frozen=True)
class Fault:
    """What the network does to one host's datagrams on one path."""
    loss: float = 0.0       # probability of dropping each datagram
    delay: float = 0.0      # seconds each datagram is held back
    down: bool = False      # sendto fails (ENETUNREACH)


NO_FAULT = Fault()


class Faults:
    """Faults by (host, path); either may be :data:`ANY`. The most
    precise entry wins: (host, path), (host, ANY), (ANY, path), (ANY,
    ANY)."""

    def __init__(self):
        self._table = {}

    def set(self, host=None, path=None, loss=None, delay=None, down=None):
        """Change the given fields of the entry of (``host``, ``path``)
        (None: every host / every path); the others keep their value."""
        if loss is not None and not 0.0 <= float(loss) <= 1.0:
            raise ValueError("loss must be a probability (0 to 1)")
        if delay is not None and float(delay) < 0:
            raise ValueError("delay must be 0 or more seconds")
        key = (host or ANY, path or ANY)
        old = self._table.get(key, NO_FAULT)
        self._table[key] = Fault(
            loss=old.loss if loss is None else float(loss),
            delay=old.delay if delay is None else float(delay),
            down=old.down if down is None else bool(down))

    def clear(self, host=None, path=None):
        """Remove the entry of (``host``, ``path``); with neither given,
        every entry."""
        if host is None and path is None:
            self._table.clear()
        else:
            self._table.pop((host or ANY, path or ANY), None)

    def get(self, host, path):
        table = self._table
        if not table:
            return NO_FAULT
        for key in ((host, path), (host, ANY), (ANY, path), (ANY, ANY)):
            fault = table.get(key)
            if fault is not None:
                return fault
        return NO_FAULT


class Network:
    """The shared sockets (one per path source address), the delay queue
    and the random source of losses. ``paths`` is {path name: source
    address}; ``clock`` the simulator's; ``socket_factory`` makes the
    real sockets (tests give fakes)."""

    def __init__(self, paths, clock, faults=None, seed=0,
                 socket_factory=socket.socket):
        self.paths = dict(paths)
        self._by_address = {}
        for name, address in self.paths.items():
            if address in self._by_address:
                raise ValueError("paths %s and %s share the source address "
                                 "%s: give each path its own"
                                 % (self._by_address[address], name,
                                    address))
            self._by_address[address] = name
        self.clock = clock
        self.faults = faults if faults is not None else Faults()
        self._random = random.Random(seed)
        self._socket_factory = socket_factory
        self._sockets = {}
        self._delayed = []
        self._order = itertools.count()
        #: (path, outcome) -> datagrams: sent, lost, delayed, down, failed
        self.counts = collections.Counter()

    def path_of(self, address):
        """The name of the path whose source address is ``address``."""
        try:
            return self._by_address[address]
        except KeyError:
            raise OSError(errno.EADDRNOTAVAIL,
                          "no simulated path has the address %s" % address)

    def _socket(self, family, address):
        sock = self._sockets.get((family, address))
        if sock is None:
            sock = self._socket_factory(family, socket.SOCK_DGRAM)
            try:
                sock.setblocking(False)
                sock.bind((address, 0))
            except OSError:
                sock.close()
                raise
            self._sockets[(family, address)] = sock
        return sock

    def open(self):
        """Bind every path's shared socket now (so that a bad address
        fails at start, not at the first beat)."""
        for address in self._by_address:
            self._socket(_family(address), address)

    def send(self, host, path, family, data, destination):
        """One datagram of ``host`` on ``path``, through its faults."""
        fault = self.faults.get(host, path)
        if fault.down:
            self.counts[(path, "down")] += 1
            raise OSError(errno.ENETUNREACH, "Network is unreachable "
                          "(simulated: path %s down)" % path)
        if fault.loss and self._random.random() < fault.loss:
            self.counts[(path, "lost")] += 1
            return len(data)
        sock = self._socket(family, self.paths[path])
        if fault.delay > 0:
            heapq.heappush(self._delayed, (
                self.clock() + fault.delay, next(self._order), path, sock,
                data, destination))
            self.counts[(path, "delayed")] += 1
            return len(data)
        sock.sendto(data, destination)
        self.counts[(path, "sent")] += 1
        return len(data)

    def flush(self, now):
        """Send the delayed datagrams due by ``now``; return when the next
        one is due (None: none waits)."""
        delayed = self._delayed
        while delayed and delayed[0][0] <= now:
            _, _, path, sock, data, destination = heapq.heappop(delayed)
            try:
                sock.sendto(data, destination)
            except OSError as e:
                self.counts[(path, "failed")] += 1
                LOG.debug("sim.agent_delayed_send_failed", path=path,
                          error=str(e))
            else:
                self.counts[(path, "sent")] += 1
        return delayed[0][0] if delayed else None

    @property
    def sockets(self):
        """{socket: path name}: the shared sockets (where the engines'
        challenges to every host arrive)."""
        return {sock: self._by_address[address]
                for (_, address), sock in self._sockets.items()}

    def delivers(self, host, path):
        """Whether a datagram to ``host`` on ``path`` gets through its
        faults (a path down or a loss drops it; a delay applies to what
        the host sends only)."""
        fault = self.faults.get(host, path)
        if fault.down:
            self.counts[(path, "down_in")] += 1
            return False
        if fault.loss and self._random.random() < fault.loss:
            self.counts[(path, "lost_in")] += 1
            return False
        return True

    @property
    def waiting(self):
        """Datagrams held back by a delay, not yet sent."""
        return len(self._delayed)

    def close(self):
        for sock in self._sockets.values():
            sock.close()
        self._sockets.clear()
        self._delayed.clear()


def _family(address):
    return socket.AF_INET6 if ":" in address else socket.AF_INET


class PathSocket:
    """What one host's Sender takes for a socket (see the module's text):
    ``bind`` picks the path by its source address, ``sendto`` goes
    through :meth:`Network.send`."""

    def __init__(self, network, host, family):
        self._network = network
        self._host = host
        self._family = family
        self.path = None

    def setblocking(self, flag):
        pass

    def bind(self, address):
        self.path = self._network.path_of(address[0])

    def sendto(self, data, destination):
        if self.path is None:
            raise OSError(errno.EDESTADDRREQ, "simulated path socket not "
                          "bound to a path's address")
        return self._network.send(self._host, self.path, self._family,
                                  data, destination)

    def close(self):
        self.path = None

    def getsockname(self):
        return (self._network.paths.get(self.path, "0.0.0.0"), 0)
