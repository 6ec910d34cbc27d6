"""Refuse authentic datagrams that were seen before or held back.

A signature proves who sent a datagram, not when: anyone on the network
can record a beat and send it again later, to make a dead host look
alive. :class:`ReplayGuard` refuses, per host:

* ``replayed``: a sequence number not above the last one accepted on
  that path in the current boot, or a datagram of a boot the guard saw
  replaced by a newer one (boot ids are random: a real reboot always
  brings a new one);
* ``stale``: a send time too far from what the host's clock has shown.

Clocks. Hosts' clocks may be off (the engine must not lose a host whose
clock is 90 s wrong), so the send time is never compared with the
receiver's clock directly. The first accepted datagram of a boot sets
the host's offset ``now - sent_at`` (clock difference plus network
delay); a later one is stale when its own ``now - sent_at`` differs
from that offset by more than ``window`` seconds. A datagram held back
and sent later shows its age there; a steady skew does not. Each boot
learns its offset anew, so a host that reboots with its clock set
forward is accepted; one whose first beat of a new boot is *older* than
``window`` by the previous boot's offset is refused as stale (that is
what a recorded beat of an old boot looks like). A host whose clock
steps by more than ``window`` within a boot (the agent sends a clock
that does not step while it runs, see :mod:`instanceha.agent.sender`,
but an agent restarted after the step reads the new one) has its beats
refused as stale until ``RELEARN`` of them in a row, in sequence on
their path (a lost beat or two between them aside) and agreeing on one
new offset, show a
sender that runs on: that offset is learned (a beat held back and sent
later is one datagram, not a run of fresh ones; a held-back run only
delays detection by its length, it never fences). A host whose clock
goes backwards across a reboot is refused until the guard forgets it:
meanwhile its agent counts as silent, and Nova's heartbeat keeps it
from being fenced.

With ``learn_offset=False`` (the agent's guard on engines' requests)
there is no learning: a datagram is stale when ``|now - sent_at|``
exceeds ``window``, so a recording replayed after the receiver
restarted is refused too; senders' clocks must then agree within the
window.

Trust on first use: the first datagram of a host the guard does not
know (after the receiver starts, or after it forgot the host) sets its
offset. So the guard alone does not prove a beat recent: beats held back
through a silence pass once the offset is learned anew, and a recording
passes after the receiver restarts. The engine's veto rests on the
challenges a beat echoes (:mod:`instanceha.heartbeat.challenge`), not on
this guard. Memory is bounded: a host with no accepted datagram for
``forget_after`` seconds is forgotten (checked on every call, cheaply:
hosts are kept in the order they were last accepted), and beyond
``max_hosts`` the least recently accepted host is forgotten first.
Each host keeps its last ``boots_kept`` boot ids and one sequence
number per path.
"""

import collections
from typing import Optional

REPLAYED = "replayed"
STALE = "stale"


#: Stale beats in a row, in sequence and agreeing on a new offset, after
#: which that offset is learned (a clock stepped within a boot).
RELEARN = 5


class _Host:
    __slots__ = ("boot_id", "offset", "seqs", "seen", "retired", "stepped")

    def __init__(self, boot_id, offset, boots_kept):
        self.boot_id = boot_id
        self.offset = offset
        self.seqs = {}
        self.seen = None
        self.retired = collections.deque(maxlen=boots_kept)
        #: path -> (last seq, first offset, count) of its stale beats in a
        #: row
        self.stepped = {}


class ReplayGuard:
    """Per-host replay and freshness check; see the module's text."""

    def __init__(self, window: float = 30.0, learn_offset: bool = True,
                 forget_after: float = 86400.0, max_hosts: int = 100000,
                 boots_kept: int = 8):
        if window <= 0 or forget_after <= 0 or max_hosts < 1:
            raise ValueError("window, forget_after and max_hosts must be "
                             "positive")
        self.window = float(window)
        self.learn_offset = learn_offset
        self.forget_after = float(forget_after)
        self.max_hosts = max_hosts
        self.boots_kept = boots_kept
        self._hosts: "collections.OrderedDict[str, _Host]" = \
            collections.OrderedDict()

    def __len__(self):
        return len(self._hosts)

    def forget(self, host):
        """Drop what is known of ``host``: its next datagram is trusted
        on first use (an operator's way out after a clock step)."""
        self._hosts.pop(host, None)

    def offset(self, host) -> Optional[float]:
        """The learned ``now - sent_at`` of ``host``'s current boot (its
        clock's lag plus network delay), or None when unknown."""
        state = self._hosts.get(host)
        return None if state is None else state.offset

    def check(self, host, path, boot_id, seq, sent_at,
              now) -> Optional[str]:
        """None when the datagram is accepted (and remembered), else
        ``"replayed"`` or ``"stale"``. ``now`` is the receiver's clock,
        in the same unit as ``sent_at`` (seconds)."""
        self._prune(now)
        lag = now - sent_at
        state = self._hosts.get(host)
        if state is None:
            if not self.learn_offset and self._stale(lag, 0.0):
                return STALE
            state = _Host(boot_id, self._learned(lag), self.boots_kept)
            self._hosts[host] = state
            while len(self._hosts) > self.max_hosts:
                self._hosts.popitem(last=False)
        elif boot_id != state.boot_id:
            if boot_id in state.retired:
                return REPLAYED
            # Older than the current boot allows: a recording.
            if lag - state.offset > self.window or (
                    not self.learn_offset and self._stale(lag, 0.0)):
                return STALE
            state.retired.append(state.boot_id)
            state.boot_id = boot_id
            state.offset = self._learned(lag)
            state.seqs = {}
        else:
            last = state.seqs.get(path)
            if last is not None and seq <= last:
                return REPLAYED
            if self._stale(lag, state.offset):
                if not (self.learn_offset and self._relearned(
                        state, path, seq, lag)):
                    return STALE
            else:
                state.stepped.pop(path, None)
        state.seqs[path] = seq
        state.seen = now
        self._hosts.move_to_end(host)
        return None

    @staticmethod
    def _relearned(state, path, seq, lag):
        """A stale beat: True (offset learned anew) when it ends a run of
        RELEARN stale beats on ``path`` in sequence (gaps of up to two
        lost beats) agreeing on one new offset; else the run is noted or
        started again."""
        run = state.stepped.get(path)
        if (run is not None and run[0] < seq <= run[0] + 3
                and abs(lag - run[1]) <= 1.0):
            run = (seq, run[1], run[2] + 1)
        else:
            run = (seq, lag, 1)
        state.stepped[path] = run
        if run[2] < RELEARN:
            # Not accepted, but its place in the run is kept.
            return False
        state.offset = lag
        state.stepped.clear()
        return True

    def _learned(self, lag):
        return lag if self.learn_offset else 0.0

    def _stale(self, lag, offset):
        return abs(lag - offset) > self.window

    def _prune(self, now):
        hosts = self._hosts
        while hosts:
            state = next(iter(hosts.values()))
            if now - state.seen <= self.forget_after:
                return
            hosts.popitem(last=False)
