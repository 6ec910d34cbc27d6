"""Why one server's evacuation did not finish, and whether sending it again
may cure that. Pure: no I/O, no clock; the evacuator brings the facts.

A retry is only ever proposed when Nova can no longer be working on the
previous request: it failed for good, or the host rebuilding the server is
forced down (proven dead). Nova 34 accepts evacuating a server still in
task state ``rebuilding``, so this is what keeps a server from being
rebuilt on two hosts at once.
"""

import dataclasses
from typing import Optional

NO_CAPACITY_MARKERS = ("no valid host",)
#: The conductor's instance action event for an evacuation (Nova 34).
CONDUCTOR_EVENTS = ("rebuild_server", "conductor_rebuild_server")
#: Faults of a rebuild that failed for a reason of the moment.
TRANSIENT_MARKERS = ("messagingtimeout", "timed out waiting for a reply",
                     "computehostnotfound", "compute host not found",
                     "service unavailable", "connection refused",
                     "unable to establish connection")


@dataclasses.dataclass(frozen=True)
class Verdict:
    """status is what the journal records for the attempt: ``retry``,
    ``no_capacity`` (the host waits for capacity as a whole), ``failed``,
    ``refused``, ``gone``."""
    status: str
    reason: str

    @property
    def retryable(self):
        return self.status == "retry"


def alive(service):
    """Nova would schedule onto it: up and not forced down."""
    return service.state == "up" and not service.forced_down


def request_error(error):
    """The evacuate request itself failed (a ComputeError from the
    driver): Nova 5xx or unreachable may pass; a refusal will not."""
    status = getattr(error, "status", None)
    name = type(error).__name__
    if name == "NotFound":
        return Verdict("gone", "server deleted")
    if name == "Conflict":
        return Verdict("refused", "Nova refused the evacuation: %s" % error)
    if status is None or status >= 500 or status == 429:
        return Verdict("retry", "Nova API error: %s" % error)
    return Verdict("refused", "Nova refused the evacuation: %s" % error)


def rebuild_failed(fault, dest=None, dest_service=None):
    """Nova ended the rebuild in error (migration error/failed, the server
    no longer rebuilding). ``fault`` is the server's fault message."""
    text = fault or "the rebuild failed without a fault message"
    low = text.lower()
    if any(m in low for m in NO_CAPACITY_MARKERS):
        return Verdict("no_capacity", text)
    if dest is not None and dest_service is not None \
            and not alive(dest_service):
        return Verdict("retry", "destination %s went down during the "
                                "rebuild: %s" % (dest, text))
    if any(m in low for m in TRANSIENT_MARKERS):
        return Verdict("retry", "transient rebuild failure: %s" % text)
    return Verdict("failed", text)


def in_flight(source, dest, via, services, candidates, events, age,
              stall_timeout):
    """An evacuation Nova still shows in progress. Returns
    ``(verdict, waiting)``: a retry verdict once it provably cannot
    progress, else None and why it is being waited for (None: nothing
    unusual).

    ``dest``: its destination when known, ``via`` where from (the
    migration, a notification). ``services``: {host: ComputeService} now.
    ``candidates``: hosts Nova could schedule onto when the request was
    sent. ``events``: the latest evacuate request's instance action events
    ([ActionEvent]), or None when not asked or not known. ``age``: seconds
    since the request.
    """
    if dest is None and events:
        compute = [e for e in events
                   if e.event.startswith("compute_") and e.host]
        if compute:
            dest, via = compute[-1].host, "instance action"
    if dest is not None:
        svc = services.get(dest)
        if svc is None or alive(svc):
            return None, None
        if not svc.forced_down:
            return None, ("destination %s is down; its rebuild is sent "
                          "again once that host is fenced" % dest)
        return Verdict("retry", "destination %s (from the %s) went down "
                                "during the rebuild and is forced down now"
                                % (dest, via)), None
    if events is None or age < stall_timeout:
        return None, None
    # The conductor records its step as "rebuild_server" (EventReporter,
    # no prefix); the compute's as "compute_rebuild_instance".
    conductor = [e for e in events if e.event in CONDUCTOR_EVENTS]
    if not conductor or not conductor[-1].finished \
            or (conductor[-1].result or "").lower() != "success":
        return None, None     # not sent to a compute (yet), or it failed
    waited = "no compute took the rebuild in %.0fs" % age
    suspects = sorted(h for h in candidates
                      if h != source and h in services
                      and not alive(services[h]))
    if not suspects:
        return None, ("%s, and every host it could have been sent to is "
                      "up: waiting" % waited)
    unfenced = [h for h in suspects if not services[h].forced_down]
    if unfenced:
        return None, ("%s; waiting for %s (schedulable when it was sent, "
                      "down now) to be fenced" % (waited, ", ".join(unfenced)))
    return Verdict("retry", "%s; every host it could have been sent to and "
                            "now down is forced down: %s"
                   % (waited, ", ".join(suspects))), None


def destination_from_notification(facts, since) -> Optional[str]:
    """The host the conductor chose, from the publisher of an
    ``instance.rebuild_scheduled`` notification recorded since ``since``
    (Nova publishes it as nova-conductor:<destination>)."""
    if facts.get("event") == "instance.rebuild_scheduled" \
            and facts.get("at", 0) >= since:
        return facts.get("publisher_host")
    return None
