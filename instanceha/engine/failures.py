"""Why one server's evacuation did not finish, and whether sending it again
may cure that. Pure: no I/O, no clock; the evacuator brings the facts.

A retry is only ever proposed when Nova can no longer be working on the
previous request: it failed for good, or the host rebuilding the server is
forced down (proven dead). Nova 34 accepts evacuating a server still in
task state ``rebuilding``, so this is what keeps a server from being
rebuilt on two hosts at once.
"""

import dataclasses
from typing import (Any, Collection, Mapping, Optional, Sequence, Tuple)

from instanceha.drivers.compute.base import (ActionEvent, ComputeService,
                                             Migration, Server)

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
    ``refused``, ``gone``. ``suspects``: hosts whose message queue may
    still hold the rebuild being given up (it runs if they come back)."""
    status: str
    reason: str
    suspects: Tuple[str, ...] = ()

    @property
    def retryable(self) -> bool:
        return self.status == "retry"


def alive(service: ComputeService) -> bool:
    """Nova would schedule onto it: up and not forced down."""
    return service.state == "up" and not service.forced_down


def request_error(error: BaseException) -> Verdict:
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


def rebuild_failed(fault: Optional[str], dest: Optional[str] = None,
                   dest_service: Optional[ComputeService] = None
                   ) -> Verdict:
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


def in_flight(source: str, dest: Optional[str], via: Optional[str],
              services: Mapping[str, ComputeService],
              unschedulable: Optional[Collection[str]],
              events: Optional[Sequence[ActionEvent]], age: float,
              stall_timeout: float
              ) -> Tuple[Optional[Verdict], Optional[str]]:
    """An evacuation Nova still shows in progress. Returns
    ``(verdict, waiting)``: a retry verdict once it provably cannot
    progress, else None and why it is being waited for (None: nothing
    unusual).

    ``dest``: its destination when known, ``via`` where from (the
    migration, a notification). ``services``: {host: ComputeService} now.
    ``unschedulable``: hosts Nova could not schedule onto when the
    request was sent (every other host could have taken it), None when
    not known (no host is then suspected). ``events``: the latest evacuate request's instance action events
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
        # Known from a migration it claimed or an instance action event it
        # wrote, the destination took the rebuild: nothing waits in its
        # queue. Known only from the conductor's notification, it may not.
        queued: Tuple[str, ...] = (dest,) if via == "notification" else ()
        return Verdict("retry", "destination %s (from the %s) went down "
                                "during the rebuild and is forced down now"
                                % (dest, via), queued), None
    if events is None or age < stall_timeout:
        return None, None
    # The conductor records its step as "rebuild_server" (EventReporter,
    # no prefix); the compute's as "compute_rebuild_instance".
    conductor = [e for e in events if e.event in CONDUCTOR_EVENTS]
    if not conductor or not conductor[-1].finished \
            or (conductor[-1].result or "").lower() != "success":
        return None, None     # not sent to a compute (yet), or it failed
    waited = "no compute took the rebuild in %.0fs" % age
    suspects = [] if unschedulable is None else sorted(
        h for h, svc in services.items()
        if h != source and h not in unschedulable and not alive(svc))
    if not suspects:
        return None, ("%s, and every host it could have been sent to is "
                      "up: waiting" % waited)
    unfenced = [h for h in suspects if not services[h].forced_down]
    if unfenced:
        return None, ("%s; waiting for %s (schedulable when it was sent, "
                      "down now) to be fenced" % (waited, ", ".join(unfenced)))
    return Verdict("retry", "%s; every host it could have been sent to and "
                            "now down is forced down: %s"
                   % (waited, ", ".join(suspects)), tuple(suspects)), None


def destination_from_notification(facts: Mapping[str, Any], since: float
                                  ) -> Optional[str]:
    """The host the conductor chose, from the publisher of an
    ``instance.rebuild_scheduled`` notification recorded since ``since``
    (Nova publishes it as nova-conductor:<destination>)."""
    if facts.get("event") == "instance.rebuild_scheduled" \
            and facts.get("at", 0) >= since:
        return facts.get("publisher_host")
    return None


#: What a check of one stale rebuild decides (see :func:`stale_rebuild`).
STALE_REPAIR, STALE_WAIT, STALE_CLEAR, STALE_CONFLICT = (
    "repair", "wait", "clear", "conflict")
#: Migration statuses a rebuild that ran and failed ends in.
_FAILED = ("failed", "error")


def stale_rebuild(server: Optional[Server], migrations: Sequence[Migration],
                  suspect: str, done_host: Optional[str], waited: float,
                  wait_limit: float, other_suspects: Collection[str] = ()
                  ) -> Tuple[str, str]:
    """A host that was sent a rebuild while dying has come back; its compute
    runs what waited in its queue. Decide about one server sent again
    elsewhere meanwhile. Returns ``(decision, reason)``:

    * ``repair``: the old rebuild ran, found the server's task state
      changed, failed, and set the server to error though it runs on
      ``done_host`` (where instanceha rebuilt it): reset it to active;
    * ``wait``: the old rebuild has not run yet (its migration is still
      ``accepted``, or ``pre-migrating`` on this host), for at most
      ``wait_limit`` seconds after the host came back;
    * ``conflict``: the returning host rebuilt the server too: two copies
      may run; an operator must look (nothing automatic is safe);
    * ``clear``: nothing (left) to do.

    ``server``: the Server now, None if deleted. ``migrations``: its
    evacuation migrations. ``done_host``: where instanceha's journal says it
    was rebuilt (None: not rebuilt by instanceha). ``other_suspects``: the
    other hosts the same old rebuild may have been cast to (when the
    destination was not known, every host that could have been it): once
    it ran on one of them, it cannot run here.

    Nova's conductor works on a server's oldest ``accepted`` migration, so
    the retry reuses the old rebuild's migration and leaves its own
    ``accepted`` for ever; the old rebuild, when it runs, marks that reused
    migration ``failed`` with this host as destination.
    """
    if server is None:
        return STALE_CLEAR, "server deleted"
    if server.host == suspect:
        if done_host and done_host != suspect:
            return STALE_CONFLICT, (
                "%s ran the old rebuild when it came back and Nova now puts "
                "the server there, though instanceha rebuilt it on %s: a "
                "second copy may run; check both hosts" % (suspect, done_host))
        return STALE_CLEAR, "rebuilt on %s when it came back" % suspect
    ran = [m for m in migrations if m.dest_host == suspect
           and m.status in _FAILED]
    if ran and (server.vm_state or "") == "error":
        if done_host and server.host == done_host:
            return STALE_REPAIR, (
                "the rebuild queued for %s ran when it came back, failed on "
                "the server's changed task state and set it to error; it "
                "runs on %s, where instanceha rebuilt it" % (suspect,
                                                             done_host))
        return STALE_CLEAR, ("in error after the old rebuild ran on %s, but "
                             "not rebuilt by instanceha elsewhere: left for "
                             "an operator" % suspect)
    elsewhere = [m.dest_host for m in migrations if m.status in _FAILED
                 and m.dest_host in other_suspects]
    if elsewhere and not ran:
        return STALE_CLEAR, "the old rebuild ran on %s, not here" % \
            elsewhere[0]
    pending = [m for m in migrations if m.status == "accepted"
               or (m.status == "pre-migrating"
                   and m.dest_host in (None, suspect))]
    if pending and not ran and waited < wait_limit:
        return STALE_WAIT, ("its old rebuild may still run on %s (migration "
                            "%s)" % (suspect, pending[0].status))
    if ran:
        return STALE_CLEAR, "the old rebuild ran on %s and did no harm" % \
            suspect
    if pending:
        return STALE_CLEAR, ("the old rebuild did not run within %.0fs of %s "
                             "coming back" % (wait_limit, suspect))
    return STALE_CLEAR, "no old rebuild left for %s" % suspect
