"""Compute (Nova) driver interface and the plain records it returns.

Drivers translate their library's exceptions into :class:`ComputeError` and
its subclasses; callers never see openstacksdk or keystoneauth exceptions.
"""

import abc
import dataclasses
import threading
from typing import Any, Callable, Mapping, NamedTuple, Optional, Tuple

from instanceha.drivers.compute.nova_clock import NovaClock
from instanceha.util.writes import write


class ComputeService(NamedTuple):
    """One row of Nova's os-services.

    A named tuple of plain values (one object per row, where a dataclass
    instance had a ``__dict__`` beside it). CPython's collector still
    tracks it (it stops tracking exact tuples only), so the reads of the
    whole cloud (the reconcile pass, an evacuation's read of the services)
    run with the collector paused (``runtime.collection_paused``): their
    rows die young instead of being promoted and setting off full
    collections. ``_replace`` gives a changed copy."""

    id: str                     # service UUID (microversion >= 2.53)
    host: str
    state: str                  # "up" | "down" as Nova computes it
    status: str                 # "enabled" | "disabled"
    forced_down: bool
    disabled_reason: Optional[str]
    updated_at: Optional[float]  # seconds since the epoch, None if never seen
    zone: Optional[str] = None
    binary: str = "nova-compute"  # nova-scheduler, nova-conductor: see
    #                               ComputeDriver.list_control_services


@dataclasses.dataclass(frozen=True)
class Server:
    id: str
    name: str
    status: str                 # ACTIVE, SHUTOFF, ERROR, REBUILD, ...
    host: Optional[str]
    task_state: Optional[str] = None
    vm_state: Optional[str] = None
    fault: Optional[str] = None
    power_state: Optional[int] = None  # Nova's: 1 running, 4 shutdown, ...
    #: Nova's answer as given (metadata, tags, flavor with extra specs,
    #: created): what the recovery policies read
    raw: Mapping[str, Any] = dataclasses.field(default_factory=dict,
                                               repr=False, compare=False)


@dataclasses.dataclass(frozen=True)
class Migration:
    id: str
    server_id: str
    source_host: str
    dest_host: Optional[str]
    status: str                 # accepted, pre-migrating, done, completed, error, failed
    migration_type: str         # evacuation, live-migration, migration, resize
    created_at: Optional[float] = None
    updated_at: Optional[float] = None  # epoch seconds, None if never


@dataclasses.dataclass(frozen=True)
class ServerMigration:
    """One in-progress live migration of a server, as
    ``GET /servers/{id}/migrations`` shows it (Nova lists only live
    migrations there, and only while ``queued``, ``preparing``, ``running``
    or ``post-migrating``: an ``accepted`` one, still with the conductor,
    is not listed yet)."""
    id: str                     # Nova's integer id, as abort and
    #                             force-complete take it
    server_id: str
    status: str                 # queued, preparing, running, post-migrating
    source_host: Optional[str] = None
    dest_host: Optional[str] = None
    memory_total: Optional[int] = None      # bytes
    memory_remaining: Optional[int] = None
    disk_total: Optional[int] = None
    disk_remaining: Optional[int] = None
    updated_at: Optional[float] = None      # epoch seconds
    uuid: Optional[str] = None              # the migration's uuid (the id
    #                                         os-migrations rows carry)


@dataclasses.dataclass(frozen=True)
class ActionEvent:
    """One event of a server's instance action (os-instance-actions)."""
    event: str          # rebuild_server (conductor), compute_rebuild_instance
    host: Optional[str]         # where it ran (microversion >= 2.62)
    finished: bool
    result: Optional[str] = None  # Success | Error, once finished


@dataclasses.dataclass(frozen=True)
class InstanceAction:
    """One instance action of a server (os-instance-actions): who asked
    (user and project None: Nova's own context, e.g. its power-state
    sync's stop)."""
    action: str         # stop, start, reboot, resetState, migrate...
    user_id: Optional[str] = None
    project_id: Optional[str] = None
    request_id: Optional[str] = None
    start_time: Optional[float] = None

@dataclasses.dataclass(frozen=True)
class Aggregate:
    """A Nova host aggregate (os-aggregates)."""
    name: str
    hosts: Tuple[str, ...]
    zone: Optional[str] = None          # its availability_zone, if any
    metadata: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    id: Optional[str] = None            # Nova's id, to change its metadata


@dataclasses.dataclass(frozen=True)
class HostCapacity:
    """What a compute host can still take, as Placement (or, without it,
    os-hypervisors) counts it. Totals are usable amounts: (inventory total
    - reserved) * allocation_ratio; ``*_used`` are the allocations."""
    host: str
    vcpus: int
    vcpus_used: int
    ram_mb: int
    ram_mb_used: int
    disk_gb: int
    disk_gb_used: int
    source: str = "placement"           # "placement" | "hypervisors"


class ComputeError(Exception):
    """Nova answered with an error or could not be reached.

    ``unanswered``: the request was sent but no answer came (a timeout, a
    connection cut once sent, a gateway's 502 or 504): it may still be
    queued before Nova's API and take effect later."""

    def __init__(self, message, status=None, unanswered=False):
        super().__init__(message)
        self.status = status
        self.unanswered = unanswered


class Conflict(ComputeError):
    """Nova refused because of the resource's state (HTTP 400/409)."""


class NotFound(ComputeError):
    """The resource does not exist (HTTP 404)."""


class NoEndpoint(ComputeError):
    """Neither the service catalog nor clouds.yaml names an endpoint for
    the service (a configuration fact, not an outage)."""


class CallRecord:
    """When Nova's API was last seen whole, and when a call last failed.

    The sources that read os-services note each read that succeeded
    (``services_read``, with the times the read started and ended) and
    each that
    failed; the driver notes every request that failed (``failed``: HTTP
    5xx, no answer, an answer that is not JSON; a 4xx is an answer). No
    clock of its own: callers pass monotonic times (this node's), so tests
    inject theirs. The control-plane gate reads it: no power-off without a
    recent successful read and no failure since."""

    def __init__(self):
        self._lock = threading.Lock()
        self.read_at = None         # start of the last good os-services read
        self.answered_at = None     # and when its answer was in
        self.failed_at = None       # last failed call
        self.failure = None         # what failed, why

    def services_read(self, started, ended):
        with self._lock:
            if self.read_at is None or started > self.read_at:
                self.read_at, self.answered_at = started, ended

    def failed(self, at, what, error):
        with self._lock:
            if self.failed_at is None or at >= self.failed_at:
                self.failed_at = at
                # The driver's errors name the call already.
                self.failure = str(error) or "%s: %s" % (
                    what, type(error).__name__)

    def view(self):
        """(read_at, answered_at, failed_at, failure), one consistent
        reading."""
        with self._lock:
            return (self.read_at, self.answered_at, self.failed_at,
                    self.failure)


class ComputeDriver(abc.ABC):

    #: None, or a callable that returns None while a request that changes
    #: something may go out now, else why not (a coordinated member's
    #: may_act). Drivers ask it right before each such request: the guard
    #: at a write method's entry (instanceha.coordination) does not cover
    #: the later requests of a write made of several (a marker's DELETE
    #: then its POST) when the process froze between them.
    write_gate: Optional[Callable[[], Optional[str]]] = None

    # One per driver object, shared by every source that reads services
    # through it (the reconciler, the control-plane monitor), created on
    # first use: subclasses need not call an __init__ here.
    @property
    def nova_clock(self):
        """Nova's clock as os-services shows it (NovaClock)."""
        return _shared(self, "_nova_clock", NovaClock)

    @property
    def api_record(self):
        """The CallRecord of this driver's Nova API calls."""
        return _shared(self, "_call_record", CallRecord)

    @abc.abstractmethod
    def list_services(self):
        """All nova-compute services, in one API call: [ComputeService]."""

    def service_of(self, host):
        """The nova-compute service of ``host`` (ComputeService), or None
        when Nova lists none: that one row, read afresh. Drivers that can
        ask Nova for one host's row override this whole-list reading."""
        return next((s for s in self.list_services() if s.host == host),
                    None)

    @write
    @abc.abstractmethod
    def force_down(self, service, reason):
        """Mark the service forced down and disabled with ``reason``.

        Returns the service as Nova answered (ComputeService), or None if
        the answer did not include it."""

    @write
    @abc.abstractmethod
    def restore(self, service, enable, disabled_reason=None):
        """Unset forced_down; enable the service when ``enable``, else
        leave it disabled, with ``disabled_reason`` when given (the reason
        an operator had set before instanceha isolated it).

        Raises Conflict while Nova still refuses (evacuations not cleaned up).
        """

    @abc.abstractmethod
    def list_servers(self, host):
        """Servers on ``host`` across all projects: [Server]."""

    @abc.abstractmethod
    def get_server(self, server_id):
        """One Server; raises NotFound."""

    @write
    @abc.abstractmethod
    def evacuate(self, server_id, microversion=None, host=None):
        """Ask Nova to rebuild the server elsewhere (scheduler picks).

        ``microversion``: (major, minor) of the request, chosen per server
        by :mod:`instanceha.policy.power` (it decides the power state the
        server arrives in: from 2.95 Nova stops it); None: the configured
        ``[evacuation] microversion``. ``host``: a target host (a reserved
        host brought in); the scheduler still validates it (never forced)."""

    @write
    def stop_server(self, server_id):
        """Nova's os-stop: power the server off (it must be ACTIVE or in
        error, with no task in progress). Used only on an evacuated server
        that was powered off and that Nova started on its new host."""
        raise NotImplementedError

    @abc.abstractmethod
    def list_evacuations(self, host):
        """Evacuation migrations whose source is ``host``: [Migration]."""

    def list_aggregates(self):
        """Every host aggregate: [Aggregate]."""
        raise NotImplementedError

    def get_image(self, image_id):
        """The Glance v2 image as Glance answers it (custom properties are
        top-level fields, ``tags`` a list): a dict. Raises NotFound,
        NoEndpoint when no image endpoint is configured."""
        raise NotImplementedError

    @write
    def delete_server_metadata(self, server_id, key):
        """Remove one metadata key of a server (an expired suspension
        marker). Raises NotFound when the server or the key is gone."""
        raise NotImplementedError

    def get_aggregate(self, aggregate_id):
        """One host aggregate read now, never from a cache: Aggregate.
        Raises NotFound."""
        raise NotImplementedError

    @write
    def unset_aggregate_metadata(self, aggregate_id, key):
        """Remove one metadata key of a host aggregate (set_metadata with
        the key set to null)."""
        raise NotImplementedError

    def host_capacities(self):
        """{host: HostCapacity} for every compute host Placement (or
        os-hypervisors when Placement cannot be read) knows."""
        raise NotImplementedError

    @write
    def enable_service(self, service_id):
        """Enable a compute service (a reserved host brought in)."""
        raise NotImplementedError

    @write
    def disable_service(self, service_id, reason):
        """Disable a compute service with ``reason`` (a reserved host
        returned to the reserve)."""
        raise NotImplementedError

    @write
    def reset_state(self, server_id, state="active"):
        """Nova's os-resetState: set the server's vm_state (``active`` or
        ``error``) and clear its task state. Used only on a server that
        runs where Nova places it and an old rebuild wrongly set to error."""
        raise NotImplementedError

    def rebuild_events(self, server_id):
        """Events of the server's latest evacuate request: [ActionEvent]
        (which conductor and compute steps started and finished, on which
        host), or None when the driver cannot tell."""
        return None

    # -- moving servers off a live host (planned drain) ------------------------
    #
    # Concrete here so that drivers and fakes without them keep working:
    # each raises ComputeError("... is not supported by this compute
    # driver"). Nova's answers, read in its API and compute code: a server
    # state that refuses the request is HTTP 409 (Conflict); a request
    # Nova judges wrong (a migration in a state the call does not accept,
    # no valid host for a synchronous live migration) is HTTP 400, raised
    # as a plain ComputeError carrying Nova's message and status 400;
    # an unknown server or migration is NotFound.

    @write
    def live_migrate(self, server_id, block_migration="auto", host=None):
        """Live-migrate the server; the scheduler chooses the destination,
        or checks ``host`` when given (a fail-back's target: never forced,
        so Nova's scheduler still refuses a host that is disabled, down,
        full or unknown: a plain ComputeError with status 400, "No valid
        host was found" or "Compute host ... could not be found").
        The server must be ACTIVE or PAUSED with no task in progress
        (else Conflict). Nova then shows task_state ``migrating`` (status
        MIGRATING) and a ``live-migration`` migration record."""
        raise _unsupported("live migration")

    @write
    def cold_migrate(self, server_id):
        """Cold-migrate (resize to the same flavor) the server; the
        scheduler chooses. ACTIVE or SHUTOFF, no task, its compute up (else
        Conflict). It ends VERIFY_RESIZE on the destination, waiting for
        :meth:`confirm_resize`."""
        raise _unsupported("cold migration")

    @write
    def confirm_resize(self, server_id):
        """Confirm a finished cold migration (VERIFY_RESIZE): the server
        goes back to ACTIVE or SHUTOFF where it now is."""
        raise _unsupported("confirming a resize")

    def server_migrations(self, server_id):
        """The server's in-progress live migrations: [ServerMigration]."""
        raise _unsupported("listing a server's migrations")

    @write
    def abort_migration(self, server_id, migration_id):
        """Abort an in-progress live migration (``migration_id``: a
        ServerMigration's id); the server stays on its source."""
        raise _unsupported("aborting a live migration")

    @write
    def force_complete_migration(self, server_id, migration_id):
        """Force a running live migration to complete (the guest is paused
        for the switch-over)."""
        raise _unsupported("forcing a live migration to complete")

    def list_host_migrations(self, host, since=None):
        """Live and cold migrations (``live-migration``, ``migration``)
        from or to ``host``: [Migration], ``migration_type`` set, newest
        first. ``since`` (epoch seconds): only those changed since."""
        raise _unsupported("listing a host's migrations")

    # -- putting a host back, or retiring it (issue 24) -------------------------
    #
    # Concrete here like the moves above: each raises ComputeError("... is
    # not supported by this compute driver") in a driver without them.

    @write
    def create_server(self, name, flavor_id, image_id, host, zone=None,
                      network=None):
        """Boot a server forced onto ``host`` (a smoke test): Nova's
        availability zone form "ZONE:HOST" (``zone`` None: "nova"), which
        makes Nova's scheduler skip its filters for that host. It does
        not skip Placement: since Train (Nova 20) a disabled compute's
        resource provider carries the COMPUTE_STATUS_DISABLED trait and
        the scheduler's mandatory pre-filter forbids it, so a boot forced
        onto a *disabled* compute fails (ERROR, fault "No valid host was
        found.") unless that trait is missing (a compute older than
        Train, or a sync that failed). A compute that is down is not
        filtered either: the build waits for it, the server in BUILD.
        ``flavor_id`` and ``image_id`` are ids (Nova takes no names);
        ``network``: a network id, else no network at all. Returns the
        Server as known right after the request (possibly only its id,
        name and status BUILD); its outcome is read with get_server.
        Sent once, never again: an unanswered request may still have
        created the server."""
        raise _unsupported("creating a server")

    @write
    def delete_server(self, server_id):
        """Delete the server; a server already gone is no error."""
        raise _unsupported("deleting a server")

    @write
    def delete_service(self, service_id):
        """Delete the nova-compute service (by its id, a UUID). Nova
        refuses (Conflict, with its message) while the host still has
        servers ("hosting instances") or migrations not over from or to
        it; NotFound when there is no such service. Nova itself removes
        the host from its aggregates and deletes its resource provider."""
        raise _unsupported("deleting a compute service")

    @write
    def remove_host_from_aggregate(self, aggregate_id, host):
        """Take ``host`` out of the host aggregate ``aggregate_id``
        (Aggregate.id). NotFound when the aggregate or the host is
        unknown or the host is not in it (Nova does not say which);
        Conflict when Nova refuses the change."""
        raise _unsupported("removing a host from an aggregate")

    # -- the control plane a recovery needs (ControlPlaneMonitor) --------------
    def list_control_services(self):
        """Every nova-scheduler and nova-conductor service Nova lists, as
        ComputeService with ``binary`` set: [ComputeService]."""
        raise NotImplementedError

    def check_placement(self):
        """Return when Placement answers an authenticated read (any answer
        below HTTP 500); raise ComputeError when it does not, NoEndpoint
        when no Placement endpoint is configured."""
        raise NotImplementedError

    # -- instance repair (issue 25): one server on a healthy host --------------
    #
    # Concrete like the moves: each raises ComputeError("... is not
    # supported by this compute driver") in a driver without them.

    def find_servers(self, name):
        """Every server across all projects whose name is ``name``
        exactly: [Server] (``instanceha policy explain NAME``)."""
        raise _unsupported("finding servers by name")

    def list_all_servers(self, per_page=None):
        """Every server across all projects and hosts: [Server] (the
        failover capacity measure); with ``per_page([Server] of one page
        of Nova's list) -> [item]``, the items it returns for each page
        instead, so that a listing of the whole cloud never holds every
        server at once (called again for every page when the listing is
        retried whole)."""
        raise _unsupported("listing every server")

    def list_servers_by_status(self, status):
        """Every server across all projects and hosts whose Nova status is
        ``status`` (SHUTOFF, ERROR): [Server] (the repair sweep)."""
        raise _unsupported("listing servers by status")

    def instance_actions(self, server_id):
        """The server's instance actions, newest first as Nova lists them:
        [InstanceAction]."""
        raise _unsupported("reading instance actions")

    @write
    def start_server(self, server_id):
        """Nova's os-start (the server must be SHUTOFF with no task)."""
        raise _unsupported("starting a server")

    @write
    def reboot_server(self, server_id, hard=True):
        """Nova's reboot, HARD by default (accepted in ACTIVE, SHUTOFF,
        PAUSED, SUSPENDED and ERROR)."""
        raise _unsupported("rebooting a server")

    @write
    def rebuild_server(self, server_id, image_id):
        """Nova's rebuild from ``image_id`` in place: the server's local
        disks are lost (instance repair's opt-in last action)."""
        raise _unsupported("rebuilding a server")

    @write
    def set_server_metadata(self, server_id, items):
        """Set (merge) metadata keys of a server: {key: value}; a value of
        None removes the key (a key already gone is no error)."""
        raise _unsupported("setting server metadata")


def _unsupported(what):
    return ComputeError("%s is not supported by this compute driver" % what)


def _shared(obj, name, factory):
    found = obj.__dict__.get(name)
    if found is None:
        # setdefault is atomic: two threads racing get one object.
        found = obj.__dict__.setdefault(name, factory())
    return found


def aggregates_or_none(compute, log, effect, **fields):
    """``compute.list_aggregates()``, or None when they cannot be read (Nova
    refused or is unreachable, or the driver has no aggregates). Then
    ``log`` (a structlog logger; None: say nothing, for a caller that has
    already warned) warns ``aggregates_unavailable`` with the reason, what
    the caller does without them (``effect``) and ``fields`` (its host)."""
    try:
        return compute.list_aggregates()
    except (ComputeError, NotImplementedError) as e:
        if log is not None:
            log.warning("aggregates_unavailable", **fields,
                        reason=str(e) or type(e).__name__, effect=effect)
        return None
