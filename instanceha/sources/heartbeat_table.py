"""The engine's view of the hosts' agents, from their authenticated beats.

Pure bookkeeping for :mod:`instanceha.sources.heartbeat`: no sockets, no
threads, no locks, no clock reads (``now`` is an argument, the engine's
clock at receipt). The source holds the lock.

Per host name: the boot id, the facts of its last beat, the key id it
signs with, and per path (network) the time of its last beat and the
address it came from (where a request to the agent goes). A path is
*heard* while its last beat is younger than ``silence_timeout``; a host
is *beating* while at least one path is heard, and *silent* once every
path has been silent for ``silence_timeout`` or more.

Events are made on changes only, never for every beat:

* AGENT_BEATING on the first beat (since the start, or after a silence,
  or after the host's Nova id changed), a new boot id, a change of the
  ``compute``, ``libvirt`` or ``system_uuid`` fact, or a change of the
  set of heard paths (a path heard again on a beat, a path gone silent
  at a check);
* AGENT_SILENT once, at the first check that finds every path silent
  (with the peers' word on the host, below);
* AGENT_PEERS, while silent, at each check that finds the peers' word
  on the host changed.

The peers' word (issue 37, section 1). A beat's watchdog report may
list the agent's peers (by name digest) and whether it hears each within
its hearing window (:mod:`instanceha.agent.peers`). For a silent host H,
the agents *watching* it are those whose last report lists H; a watcher
*reports* on H when it beats (its last beat younger than
``silence_timeout``) and that beat's hearing window began after H's last
beat (the report's time minus its window is later than H's last beat:
every probe it speaks of was sent after H fell silent to the engines).
The counts (unheard, heard, watching) go into the AGENT_SILENT payload;
the state machine judges them (:func:`instanceha.fsm.agent.peers_corroborate`).
Only beats proven fresh reach this table, so a report cannot be a
replay; a stale one (its sender silent, or its window reaching back
before H's last beat) is not counted.
"""

from typing import Any, Callable, Dict, List, Optional, Set, Tuple

from instanceha.events import AgentReport, AgentSilence, Event, EventKind
from instanceha.heartbeat.protocol import Beat, Facts, name_digest
from instanceha.sources import udp

SOURCE = "agent"
BEATING = "beating"
SILENT = "silent"

#: a sender's address as recvfrom gives it: (ip, port, ...)
Address = Tuple[Any, ...]
#: classify(host name, key id) -> "current", "previous" or "shared"
Classify = Callable[[str, Optional[str]], Optional[str]]


class _Path:
    __slots__ = ("at", "address")

    def __init__(self, at: float, address: Address) -> None:
        self.at = at              # engine's clock at the last beat
        self.address = address    # (ip, port, ...) as received


#: (unheard, heard, watching): the peers' word on a silent host
PeerWord = Tuple[int, int, int]
_NO_WORD: PeerWord = (0, 0, 0)


class _Host:
    __slots__ = ("name", "host_id", "boot_id", "kid", "facts", "paths",
                 "heard", "state", "last_at", "last_path", "digest",
                 "peer_digests", "hearing", "word", "before")

    def __init__(self, name: str, host_id: str, beat: Beat,
                 kid: Optional[str], now: float) -> None:
        # Made at a host's first beat, which HostTable.beat records in
        # full: its boot id, key, facts and time, read as the last ones.
        self.name = name
        self.host_id = host_id
        self.boot_id = beat.boot_id
        self.kid = kid
        self.facts: Facts = beat.facts
        self.paths: Dict[str, _Path] = {}
        self.heard: Tuple[str, ...] = ()   # as last reported
        self.state: Optional[str] = None  # None: nothing reported yet
        self.last_at = now
        self.last_path: Optional[str] = None
        self.digest = name_digest(name)
        #: its last report's peers (digests), and (time, window, flags):
        #: whether it hears each
        self.peer_digests: Tuple[bytes, ...] = ()
        self.hearing: Optional[Tuple[float, float, Tuple[bool, ...]]] = None
        #: the peers' word last reported on it while silent
        self.word: PeerWord = _NO_WORD
        self.before: Tuple[str, ...] = ()   # paths heard before silence


def _ip(sender: Address) -> str:
    """The sender's IP address in canonical form (read when asked, not
    at every beat: parsing costs more than the rest of a beat's
    bookkeeping)."""
    try:
        return udp.normalise_address(sender[0])
    except ValueError:
        return sender[0]


def _said(word: PeerWord) -> str:
    unheard, heard, watching = word
    return ("of %d agents listing it as a peer, %d report they do not hear "
            "it, %d that they do" % (watching, unheard, heard))


def _flag(value: Optional[bool]) -> str:
    return {True: "running", False: "stopped", None: "unknown"}[value]


class HostTable:
    """Every host heard from, by name; see the module's text."""

    def __init__(self, silence_timeout: float) -> None:
        if silence_timeout <= 0:
            raise ValueError("silence_timeout must be positive")
        self.timeout = float(silence_timeout)
        self._hosts: Dict[str, _Host] = {}
        #: name digest -> names of the hosts whose last report lists it
        self._watchers: Dict[bytes, Set[str]] = {}

    def __len__(self) -> int:
        return len(self._hosts)

    def __contains__(self, name: object) -> bool:
        return name in self._hosts

    # -- changes -------------------------------------------------------------
    def beat(self, beat: Beat, kid: Optional[str], host_id: str,
             sender: Address, now: float) -> Optional[Event]:
        """Record one accepted beat (``protocol.Beat``, signed with key
        ``kid``) of the host Nova knows as ``host_id``, received from
        ``sender`` (recvfrom's address: ip, port, ...) at ``now``.
        Returns the AGENT_BEATING event when the host's view changed, else
        None."""
        host = self._hosts.get(beat.host)
        if host is None:
            host = self._hosts[beat.host] = _Host(beat.host, host_id, beat,
                                                  kid, now)
        why = []
        if host.state != BEATING or host.host_id != host_id:
            if host.state == SILENT:
                why.append("beats again after %.1fs of silence"
                           % (now - host.last_at))
            else:
                why.append("first beat")
            host.host_id = host_id
        elif beat.boot_id != host.boot_id:
            why.append("new boot %s" % beat.boot_id)
        facts = beat.facts
        old = host.facts
        if old is not None and host.state == BEATING:
            if facts.compute != old.compute:
                why.append("nova-compute %s -> %s" % (
                    _flag(old.compute), _flag(facts.compute)))
            if facts.libvirt != old.libvirt:
                why.append("libvirt %s -> %s" % (
                    _flag(old.libvirt), _flag(facts.libvirt)))
            if facts.system_uuid != old.system_uuid:
                why.append("system UUID %s -> %s" % (
                    old.system_uuid or "unknown",
                    facts.system_uuid or "unknown"))
        path = host.paths.get(beat.path)
        if path is None:
            host.paths[beat.path] = _Path(now, sender)
        else:
            path.at = now
            path.address = sender
        if beat.path not in host.heard and host.state == BEATING and \
                not why:
            why.append("heard on path %s" % beat.path)
        host.boot_id = beat.boot_id
        host.kid = kid
        host.facts = facts
        host.last_at = now
        host.last_path = beat.path
        report = beat.watchdog
        if report is not None and report.hearing is not None:
            if report.peers != host.peer_digests:
                self._watch(host, report.peers)
            host.hearing = (now, report.hearing_window, report.hearing)
        elif host.hearing is not None or host.peer_digests:
            self._watch(host, ())
            host.hearing = None
        if not why:
            return None
        host.state = BEATING
        host.heard = self._heard(host, now)
        return self._beating(host, "; ".join(why), now)

    def check(self, now: float) -> List[Event]:
        """The periodic check at ``now``: AGENT_SILENT for each host whose
        every path just fell silent, AGENT_BEATING for each host that
        lost a path but still beats on another."""
        events = []
        timeout = self.timeout
        watched = bool(self._watchers)
        for host in self._hosts.values():
            if host.state == SILENT and watched:
                word = self.peer_word(host.name, now)
                if word != host.word:
                    host.word = word
                    events.append(self._silent(
                        host, "peers' word changed: %s" % _said(word),
                        now, EventKind.AGENT_PEERS))
                continue
            if host.state != BEATING or (
                    len(host.heard) == 1 and now - host.last_at < timeout):
                continue
            heard = self._heard(host, now)
            if heard == host.heard:
                continue
            gone = ", ".join(p for p in host.heard if p not in heard)
            if heard:
                host.heard = heard
                events.append(self._beating(
                    host, "path %s silent for %.1fs or more"
                    % (gone, timeout), now))
                continue
            host.before, host.heard, host.state = host.heard, (), SILENT
            host.word = self.peer_word(host.name, now) if watched \
                else _NO_WORD
            why = ("no authenticated beat for %.1fs on any path (%s)"
                   % (now - host.last_at, gone))
            if host.word[2]:
                why += "; %s" % _said(host.word)
            events.append(self._silent(host, why, now))
        return events

    def _silent(self, host: _Host, why: str, now: float,
                kind: EventKind = EventKind.AGENT_SILENT) -> Event:
        unheard, heard, watching = host.word
        return Event(
            kind, host.host_id, now, name=host.name,
            source=SOURCE, reason=why,
            payload=AgentSilence(last_beat_at=host.last_at,
                                 paths=host.before, peers_unheard=unheard,
                                 peers_heard=heard, peers_watching=watching))

    def _watch(self, host: _Host, digests: Tuple[bytes, ...]) -> None:
        """``host``'s report now lists ``digests``: the watchers' index
        follows."""
        for digest in host.peer_digests:
            names = self._watchers.get(digest)
            if names is not None:
                names.discard(host.name)
                if not names:
                    del self._watchers[digest]
        host.peer_digests = digests
        for digest in digests:
            self._watchers.setdefault(digest, set()).add(host.name)

    def peer_word(self, name: str, now: float) -> PeerWord:
        """(unheard, heard, watching) on host ``name`` at ``now``: the
        agents whose last report lists it (watching), and of those the
        ones beating whose report's hearing window began after its last
        beat, saying they do not hear it (unheard) or do (heard). See
        the module's text."""
        host = self._hosts.get(name)
        if host is None:
            return _NO_WORD
        watchers = self._watchers.get(host.digest, ())
        unheard = heard = 0
        timeout = self.timeout
        for other in watchers:
            w = self._hosts.get(other)
            if w is None or w.hearing is None or w is host:
                continue
            at, window, flags = w.hearing
            if now - at >= timeout or at - window <= host.last_at:
                continue       # silent, or speaks of time before
            try:
                i = w.peer_digests.index(host.digest)
            except ValueError:
                continue
            if flags[i]:
                heard += 1
            else:
                unheard += 1
        return unheard, heard, len(watchers)

    def renamed(self, ids: Dict[str, str]) -> List[str]:
        """Nova's hosts changed: ``ids`` maps every known name to its
        service id. A host Nova no longer knows is forgotten; one whose id
        changed is reported afresh on its next beat. Returns the names
        forgotten."""
        gone = [name for name in self._hosts if name not in ids]
        for name in gone:
            self._watch(self._hosts[name], ())
            del self._hosts[name]
        for name, host in self._hosts.items():
            if host.host_id != ids[name]:
                host.state = None
        return gone

    # -- questions -----------------------------------------------------------
    def report(self, name: str, now: float) -> Optional[AgentReport]:
        """The host's current view while it beats (a path heard at
        ``now``), else None (never heard, or silent)."""
        host = self._hosts.get(name)
        if host is None:
            return None
        heard = self._heard(host, now)
        return self._report(host, heard) if heard else None

    def silent_since(self, name: str, now: float) -> Optional[float]:
        """When the last beat of a host now silent on every path arrived;
        None while it beats or when it never did."""
        host = self._hosts.get(name)
        if host is None or now - host.last_at < self.timeout:
            return None
        return host.last_at

    def kid(self, name: str) -> Optional[str]:
        """The key id the host's last beat was signed with, or None."""
        host = self._hosts.get(name)
        return None if host is None else host.kid

    def address(self, name: str) -> Optional[Tuple[str, str]]:
        """(ip, path) the host's most recent beat came from, or None."""
        host = self._hosts.get(name)
        if host is None or host.last_path is None:
            return None
        return _ip(host.paths[host.last_path].address), host.last_path

    def cliff(self, now: float, share: float, window: float,
              min_hosts: int) -> Optional[str]:
        """Why this engine looks cut off, or None: of the hosts whose
        agents were beating, at least ``share`` (and ``min_hosts``) fell
        silent within the last ``window`` seconds (a host falls silent at
        its last beat plus the silence timeout)."""
        beating = fallen = 0
        timeout = self.timeout
        for host in self._hosts.values():
            age = now - host.last_at
            if age < timeout:
                beating += 1
            elif age - timeout <= window:
                fallen += 1
        total = beating + fallen
        if fallen < min_hosts or fallen < share * total:
            return None
        return ("agents of %d of %d hosts fell silent within %.0fs "
                "(%.0f%%, at least %.0f%% makes a cliff): this engine may "
                "be cut off from them" % (fallen, total, window,
                                          100.0 * fallen / total,
                                          100.0 * share))

    def counts(self, now: float,
               classify: Optional[Classify] = None) -> Dict[str, Any]:
        """{beating, silent, previous_key, shared_key, paths}: hosts by
        state at ``now``; those whose last beat was signed with a previous
        key, and with the shared key, by ``classify(name, kid)``
        (``keys.HostKeyring.kind``: "current", "previous", "shared");
        and per path, the hosts heard on it now and those heard on it
        before but silent there now (each path counted on its own: one
        network down shows as its hosts silent there)."""
        beating = silent = old_key = shared = 0
        paths: Dict[str, Dict[str, int]] = {}
        for host in self._hosts.values():
            if now - host.last_at < self.timeout:
                beating += 1
            else:
                silent += 1
            kind = classify(host.name, host.kid) if classify else None
            if kind == "previous":
                old_key += 1
            elif kind == "shared":
                shared += 1
            for name, path in host.paths.items():
                count = paths.setdefault(name, {"heard": 0, "silent": 0})
                count["heard" if now - path.at < self.timeout
                      else "silent"] += 1
        return {"beating": beating, "silent": silent,
                "previous_key": old_key, "shared_key": shared,
                "paths": {name: paths[name] for name in sorted(paths)}}

    def view(self, now: float,
             classify: Optional[Classify] = None) -> Dict[str, Dict[str, Any]]:
        """{host name: dict} for status: state, paths with ages and
        addresses, facts, key id (and whether it is a previous or the
        shared key, by ``classify`` as in :meth:`counts`), boot id."""
        out: Dict[str, Dict[str, Any]] = {}
        for name, host in self._hosts.items():
            heard = self._heard(host, now)
            facts = host.facts
            kind = classify(name, host.kid) if classify else None
            out[name] = {
                "state": BEATING if heard else SILENT,
                "host_id": host.host_id,
                "boot_id": host.boot_id,
                "key_id": host.kid,
                "previous_key": kind == "previous",
                "shared_key": kind == "shared",
                "last_beat_age": round(now - host.last_at, 3),
                "paths": {p: {"age": round(now - path.at, 3),
                              "address": _ip(path.address),
                              "heard": p in heard}
                          for p, path in sorted(host.paths.items())},
                "compute": facts.compute, "libvirt": facts.libvirt,
                "guests": facts.guests, "system_uuid": facts.system_uuid}
            if not heard and host.digest in self._watchers:
                unheard, said_heard, watching = self.peer_word(name, now)
                out[name]["peers"] = {"watching": watching,
                                      "unheard": unheard,
                                      "heard": said_heard}
        return out

    # -- helpers -------------------------------------------------------------
    def _heard(self, host: _Host, now: float) -> Tuple[str, ...]:
        timeout = self.timeout
        return tuple(sorted(p for p, path in host.paths.items()
                            if now - path.at < timeout))

    @staticmethod
    def _report(host: _Host, heard: Tuple[str, ...]) -> AgentReport:
        facts = host.facts
        return AgentReport(paths=heard, boot_id=host.boot_id,
                           last_beat_at=host.last_at,
                           compute=facts.compute, libvirt=facts.libvirt,
                           guests=facts.guests,
                           system_uuid=facts.system_uuid)

    def _beating(self, host: _Host, why: str, now: float) -> Event:
        return Event(EventKind.AGENT_BEATING, host.host_id, now,
                     name=host.name, source=SOURCE, reason=why,
                     payload=self._report(host, host.heard))
