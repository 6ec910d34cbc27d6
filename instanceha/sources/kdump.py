"""fence_kdump listener: a UDP socket turning kdump messages into KDUMP
events.

A crashed host's dump kernel runs ``fence_kdump_send``, which repeats an
8-byte datagram (magic 0x1B302A40, version 1, in the sender's byte order)
every few seconds. The datagram names no host: the sender is matched to a
compute host by its source address only, through ``[kdump] host_map`` and,
unless disabled, the resolved addresses of the compute host names the
engine knows (``known_hosts()``); with ``[kdump] action = evacuate`` (no
power-off) through ``host_map`` only, never through a resolved name
(:func:`instanceha.conf.kdump.attributes_by_name`). A packet that is not
exactly such a message is counted in ``dropped_bad``; one from an address
that maps to no host, or to more than one, is counted in
``dropped_unknown`` and never becomes an event. Whether a KDUMP event means "fenced, evacuate now" or
"keep waiting" is the engine's decision (``[kdump] action``).
"""

import selectors
import socket
import struct
import threading
import time
from typing import Any, Callable, Dict, FrozenSet, Iterable, List, \
    Mapping, Optional, Set, Tuple, cast

import structlog

from instanceha.conf import kdump as kdump_conf
from instanceha.events import Event
from instanceha.events import EventKind
from instanceha.events import KdumpMessage
from instanceha.sources import udp
from instanceha.sources.base import Sink
from instanceha.sources.heartbeat_table import Address
from instanceha.sources.udp import normalise_address
from instanceha.util import datagrams

LOG = structlog.get_logger("instanceha.sources.kdump")

SOURCE = "kdump"
MAGIC = 0x1B302A40
VERSION = 1
MESSAGE_SIZE = 8
_RECV_SIZE = 64      # anything longer than a message is bad anyway

#: Nova's hosts as the engine knows them: [(service uuid, host name)]
KnownHosts = Callable[[], Iterable[Tuple[str, str]]]
#: address -> (service uuid, host name)
AddressMap = Dict[str, Tuple[str, str]]


def parse_message(data: bytes) -> Optional[str]:
    """Return the sender's byte order ("little"/"big") of a valid
    fence_kdump message, or None."""
    if len(data) != MESSAGE_SIZE:
        return None
    for order, fmt in (("little", "<II"), ("big", ">II")):
        magic, version = struct.unpack(fmt, data)
        if magic == MAGIC:
            return order if version == VERSION else None
    return None


def resolve_name(name: str) -> Set[str]:
    """Every address a host name resolves to (system resolver)."""
    infos = socket.getaddrinfo(name, None, proto=socket.IPPROTO_UDP)
    # (an IP family's address is text: typeshed allows int for others)
    return {normalise_address(cast(str, info[4][0])) for info in infos}


def build_address_map(
        known_hosts: Iterable[Tuple[str, str]],
        host_map: Optional[Mapping[str, str]],
        resolver: Optional[Callable[[str], Iterable[str]]] = None
) -> Tuple[AddressMap, List[Tuple[str, str]]]:
    """Map source address -> (service_uuid, host_name).

    ``host_map`` (name -> address) wins for the hosts it names; the other
    known hosts are resolved with ``resolver`` when given. An address that
    two hosts claim is left out: a packet from it could be either.
    Returns (address_map, problems) where problems lists what was skipped.
    """
    by_name = {name: uuid for uuid, name in known_hosts}
    claims: Dict[str, Set[str]] = {}
    problems: List[Tuple[str, str]] = []
    for name, address in (host_map or {}).items():
        try:
            claims.setdefault(normalise_address(address), set()).add(name)
        except ValueError:
            problems.append((name, "bad address in host_map: %r" % address))
    for name in by_name:
        if name in (host_map or {}) or resolver is None:
            continue
        try:
            for address in resolver(name):
                claims.setdefault(normalise_address(address), set()).add(name)
        except (OSError, ValueError) as exc:
            problems.append((name, "not resolved: %s" % exc))
    address_map: AddressMap = {}
    for address, names in claims.items():
        if len(names) > 1:
            problems.append((",".join(sorted(names)),
                             "address %s claimed by several hosts" % address))
            continue
        (name,) = names
        if name not in by_name:
            problems.append((name, "in host_map but not a known compute"))
            continue
        address_map[address] = (by_name[name], name)
    return address_map, problems


class KdumpSource:

    def __init__(self, conf: Any, sink: Sink,
                 clock: Callable[[], float] = time.time,
                 known_hosts: KnownHosts = lambda: [],
                 *, resolver: Callable[[str], Iterable[str]]
                 = resolve_name) -> None:
        self._group = conf.kdump
        self._sink = sink
        self._clock = clock
        self._known_hosts = known_hosts
        by_name = kdump_conf.attributes_by_name(self._group)
        self._resolver = resolver if by_name else None
        if self._group.resolve_names and not by_name:
            LOG.info("kdump_names_not_resolved", action=self._group.action,
                     reason="action = evacuate skips the power-off: packets "
                            "are attributed through [kdump] host_map only")
        self._lock = threading.Lock()
        self._counts = {"received": 0, "accepted": 0, "dropped_bad": 0,
                        "dropped_unknown": 0, "errors": 0}
        self._addresses: AddressMap = {}
        self._resolved_at: Optional[float] = None
        # the hosts the map was built from
        self._known: FrozenSet[Tuple[str, str]] = frozenset()
        # service uuid -> (first_at, last_at, count)
        self._episodes: Dict[str, Tuple[float, float, int]] = {}
        self._last_message_at: Optional[float] = None
        self._sock: Optional[socket.socket] = None
        self._wake_r: Optional[socket.socket] = None
        self._wake_w: Optional[socket.socket] = None
        self._thread: Optional[threading.Thread] = None
        self.port: Optional[int] = None

    # -- lifecycle -----------------------------------------------------
    def start(self, sink: Optional[Sink] = None) -> None:
        if sink is not None:
            self._sink = sink
        address = self._group.listen_address
        sock = udp.bind(address, self._group.port)
        sock.setblocking(False)     # drained at each wake-up
        self._sock = sock
        self.port = sock.getsockname()[1]
        wake_r, wake_w = socket.socketpair()
        self._wake_r, self._wake_w = wake_r, wake_w
        self.refresh()
        self._thread = threading.Thread(target=self._run,
                                        args=(sock, wake_r), daemon=True,
                                        name="kdump-listener")
        self._thread.start()
        LOG.info("kdump_listener_started", address=address, port=self.port,
                 hosts=len(self._addresses),
                 reason="listening for fence_kdump messages")

    def stop(self) -> None:
        if self._thread is None:
            return
        # start set the sockets with the thread
        socks = cast(Tuple[socket.socket, socket.socket, socket.socket],
                     (self._sock, self._wake_r, self._wake_w))
        socks[2].send(b"x")
        self._thread.join(timeout=5)
        for sock in socks:
            sock.close()
        self._thread = None
        LOG.info("kdump_listener_stopped", **self._snapshot())

    def health(self) -> Dict[str, Any]:
        return {"listening": self._thread is not None, "port": self.port,
                "addresses": len(self._addresses),
                "resolved_at": self._resolved_at,
                "last_message_at": self._last_message_at,
                **self._snapshot()}

    def _snapshot(self) -> Dict[str, int]:
        with self._lock:
            return dict(self._counts)

    # -- address map ---------------------------------------------------
    def refresh(self) -> None:
        """Rebuild the address -> host map from config and known hosts."""
        now = self._clock()
        try:
            known = list(self._known_hosts())
        except Exception as exc:   # noqa: BLE001 - keep the old map
            LOG.warning("kdump_hosts_unavailable", reason=str(exc))
            return
        address_map, problems = build_address_map(
            known, dict(self._group.host_map), self._resolver)
        for host, problem in problems:
            LOG.warning("kdump_address_skipped", host=host, reason=problem)
        self._addresses = address_map
        self._known = frozenset(known)
        self._resolved_at = now
        LOG.info("kdump_addresses_refreshed", hosts=len(known),
                 addresses=len(address_map), reason="refresh")

    def _hosts_changed(self) -> bool:
        """The engine knows other hosts than the map was built from (at
        start the map is built before the first poll of Nova)."""
        try:
            return frozenset(self._known_hosts()) != self._known
        except Exception:   # noqa: BLE001 - keep the old map
            return False

    def _refresh_due(self, now: float, unknown_sender: bool) -> bool:
        if self._resolved_at is None:
            return True
        age = now - self._resolved_at
        if unknown_sender:
            return age >= self._group.min_resolve_interval
        return age >= self._group.resolve_interval

    # -- packets -------------------------------------------------------
    def _run(self, sock: socket.socket, wake_r: socket.socket) -> None:
        selector = selectors.DefaultSelector()
        selector.register(sock, selectors.EVENT_READ, "packet")
        selector.register(wake_r, selectors.EVENT_READ, "stop")
        while True:
            ready = selector.select(timeout=self._group.resolve_interval)
            if any(key.data == "stop" for key, _ in ready):
                break
            try:
                if ready:
                    datagrams.drain(sock, _RECV_SIZE,
                                    self.handle_packet, self._failed)
                elif self._refresh_due(self._clock(), False):
                    self.refresh()
            except Exception as exc:   # noqa: BLE001 - the listener lives
                self._failed(datagrams.HANDLE, exc)
        selector.close()

    def _failed(self, stage: str, exc: BaseException) -> None:
        """A datagram not received or not handled, or a failed refresh:
        counted in ``errors``, logged with its traceback."""
        with self._lock:
            self._counts["errors"] += 1
        LOG.exception("kdump_packet_failed", reason=str(exc))

    def handle_packet(self, data: bytes, sender: Address) -> Optional[Event]:
        """One datagram from ``sender`` (address, port, ...)."""
        now = self._clock()
        with self._lock:
            self._counts["received"] += 1
        if self._refresh_due(now, False):
            self.refresh()
        address = normalise_address(sender[0])
        order = parse_message(data)
        if order is None:
            self._drop("dropped_bad", address, "not a fence_kdump v1 message",
                       size=len(data), head=data[:MESSAGE_SIZE].hex())
            return None
        host = self._addresses.get(address)
        if host is None and (self._refresh_due(now, True)
                             or self._hosts_changed()):
            self.refresh()
            host = self._addresses.get(address)
        if host is None:
            self._drop("dropped_unknown", address,
                       "source address maps to no compute host")
            return None
        uuid, name = host
        first, last, count = self._episodes.get(uuid, (now, now, 0))
        if now - last > self._group.timeout:
            first, count = now, 0     # a new dump, not the same one
        count += 1
        self._episodes[uuid] = (first, now, count)
        self._last_message_at = now
        with self._lock:
            self._counts["accepted"] += 1
        event = Event(
            kind=EventKind.KDUMP, host=uuid, at=now, name=name,
            reason="fence_kdump message %d from %s" % (count, address),
            source=SOURCE,
            payload=KdumpMessage(address=address, port=sender[1],
                                 count=count, first_at=first, last_at=now,
                                 byte_order=order))
        LOG.info("kdump_event", host=name, host_id=uuid, address=address,
                 count=count, reason="host is dumping its kernel")
        self._sink(event)
        return event

    def _drop(self, counter: str, address: str, reason: str,
              **fields: Any) -> None:
        with self._lock:
            self._counts[counter] += 1
        LOG.warning("kdump_packet_dropped", address=address, reason=reason,
                    counter=counter, **fields)
