"""What one Nova service row says of its compute host: heartbeating,
lost, or forced down by somebody else. Pure: the reconciler's pass, the
control-plane monitor and the engine's read of one host's row all judge a
row by this one function."""

from typing import Optional, Protocol, Tuple

from instanceha.events import EventKind as E
from instanceha.util import marker


class ServiceRow(Protocol):
    """What :func:`classify` reads of a Nova service row (the compute
    driver's ComputeService; the fsm imports no driver)."""

    @property
    def updated_at(self) -> Optional[float]: ...

    @property
    def disabled_reason(self) -> Optional[str]: ...

    @property
    def forced_down(self) -> bool: ...

    @property
    def state(self) -> str: ...


def classify(service: ServiceRow, now: Optional[float],
             delta: float) -> Tuple[E, str]:
    """(EventKind, reason) for one ComputeService at time ``now``, which
    must be on Nova's clock (NovaClock), like ``service.updated_at``; None
    when Nova's clock is not known: every age is then unknown and the
    row is judged by Nova's own up/down."""
    age: Optional[float] = (None if service.updated_at is None or now is None
                            else now - service.updated_at)
    fresh = age is not None and age <= delta
    ours = marker.is_ours(service.disabled_reason)
    if service.forced_down and not ours:
        return E.FORCED_DOWN, ("forced_down set with reason %r"
                               % (service.disabled_reason or ""))
    if service.forced_down:
        # Nova reports any forced-down service as down; only the heartbeat
        # tells whether the compute process is running again.
        if age is not None and fresh:
            return E.HEARTBEAT_OK, "reporting again (%.0fs ago)" % age
        return E.HEARTBEAT_LOST, _lost_reason(age)
    if service.state != "up":
        return E.HEARTBEAT_LOST, "Nova reports the service down" + (
            "" if age is None else " (last report %.0fs ago)" % age)
    if now is None:
        return E.HEARTBEAT_OK, "Nova reports the service up"
    if age is None:
        # A compute that has just started: Nova says up before its first
        # heartbeat is written. Unknown is not lost.
        return E.HEARTBEAT_OK, "Nova reports the service up (no heartbeat " \
                               "recorded yet)"
    if not fresh:
        return E.HEARTBEAT_LOST, _lost_reason(age) + " (Nova still says up)"
    return E.HEARTBEAT_OK, "reporting"


def _lost_reason(age: Optional[float]) -> str:
    if age is None:
        return "never reported"
    return "last report %.0fs ago" % age
