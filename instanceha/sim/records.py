"""The records the simulated cloud keeps: hosts (with their BMC and
nova-compute service), servers, evacuation migrations, and the API-level
errors the model raises. No behaviour here beyond trivial properties; the
rules live in model.py."""

import hashlib
import uuid

ACTIVE, STOPPED, ERROR = "active", "stopped", "error"
PAUSED, RESIZED = "paused", "resized"
BUILDING = "building"               # a server being booted (status BUILD)
SCHEDULING, SPAWNING = "scheduling", "spawning"   # its task states
REBUILDING = "rebuilding"
MIGRATING = "migrating"             # a live migration's task state
RESIZE_PREP, RESIZE_MIGRATING = "resize_prep", "resize_migrating"
RESIZE_MIGRATED, RESIZE_FINISH = "resize_migrated", "resize_finish"
RESIZE_TASKS = (RESIZE_PREP, RESIZE_MIGRATING, RESIZE_MIGRATED,
                RESIZE_FINISH)
POWER_NOSTATE, POWER_RUNNING, POWER_PAUSED, POWER_SHUTDOWN = 0, 1, 3, 4
CLEANUP_STATUSES = ("accepted", "pre-migrating", "done")
#: a live migration not over yet (the conductor's 'accepted' included)
LIVE_UNDER_WAY = ("accepted", "queued", "preparing", "running",
                  "post-migrating")
#: those GET /servers/{id}/migrations lists (Nova's in-progress statuses)
LIVE_IN_PROGRESS = ("queued", "preparing", "running", "post-migrating")
#: a cold migration before the server reaches its destination
COLD_UNDER_WAY = ("pre-migrating", "migrating", "post-migrating")

_STATUS = {ACTIVE: "ACTIVE", STOPPED: "SHUTOFF", ERROR: "ERROR",
           PAUSED: "PAUSED", RESIZED: "VERIFY_RESIZE", BUILDING: "BUILD"}


class SimError(Exception):
    """An API-level refusal; ``status`` is the HTTP code Nova would answer."""

    status = 400

    def __init__(self, message):
        super().__init__(message)
        self.message = message


class BadRequest(SimError):
    status = 400


class NotFound(SimError):
    status = 404


class Conflict(SimError):
    status = 409


def stable_uuid(seed, *parts):
    text = "%s|" % seed + "|".join(parts)
    digest = hashlib.sha256(text.encode()).digest()
    return str(uuid.UUID(bytes=digest[:16], version=4))


#: Placement resource classes the simulator keeps per host and server
RESOURCES = ("VCPU", "MEMORY_MB", "DISK_GB")


class Host:
    def __init__(self, name, index, seed, vcpus, now, ram_mb=262144,
                 disk_gb=4000):
        self.name = name
        self.service_id = index + 1
        self.service_uuid = stable_uuid(seed, "service", name)
        #: the compute node's UUID, which is also its resource provider's
        self.node_uuid = stable_uuid(seed, "provider", name)
        #: the machine's system UUID (its BMC's Redfish System UUID, what
        #: its agent reads as DMI product_uuid); the machine's, so it
        #: stays when the compute service registers anew
        self.system_uuid = stable_uuid(seed, "machine", name)
        #: the host name its BMC reports (Redfish HostName): "" for a
        #: BMC that knows none
        self.bmc_hostname = name
        self.vcpus = vcpus
        self.ram_mb = ram_mb
        self.disk_gb = disk_gb
        self.power_on = True
        self.alive = True
        self.started_at = now
        self.frozen_heartbeat = now
        self.boot_generation = 0
        self.power_generation = 0
        self.pending_power = None          # True/False while power_delay runs
        self.disabled = False
        self.disabled_reason = None
        self.forced_down = False
        self.service_updated = now
        #: its nova-compute service was deleted (os-services DELETE): no
        #: service row, compute node or resource provider until the
        #: compute starts again and registers anew; the machine and its
        #: BMC stay
        self.service_deleted = False
        self.registrations = 0              # services registered since
        self.bmc_reachable = True
        self.bmc_refuse_power_off = False
        #: hardware health the BMC reports per part (system, power_supply,
        #: fan, memory): "OK", "Warning" or "Critical"; unset parts OK
        self.hardware_health = {}
        self.hold_cleanup = False          # compute starts but skips cleanup
        #: the operating system hangs (kill): nothing on the host runs, its
        #: BMC still reads On; cleared when the power goes off
        self.hung = False
        #: boots since the simulation began (the boot id follows it) and
        #: when the last one began (power on)
        self.boots = 0
        self.booted_at = now
        self.bmc_username = "admin-" + name
        self.bmc_password = stable_uuid(seed, "bmc", name)[:13]


class Server:
    def __init__(self, sid, name, host, project_id, user_id, vcpus, now,
                 ram_mb=2048, disk_gb=20, image_id=None):
        self.id = sid
        self.name = name
        self.host = host
        self.project_id = project_id
        self.user_id = user_id
        self.vcpus = vcpus
        self.ram_mb = ram_mb
        self.disk_gb = disk_gb
        self.image_id = image_id
        self.vm_state = ACTIVE
        self.task_state = None
        self.power_state = POWER_RUNNING
        self.fault = None
        self.created = now
        self.updated = now
        self.metadata = {}
        self.tags = []

    def resources(self):
        """What the server's flavor asks of Placement."""
        return {"VCPU": self.vcpus, "MEMORY_MB": self.ram_mb,
                "DISK_GB": self.disk_gb}

    @property
    def status(self):
        """Nova's status from vm_state and task_state (its API's
        ``_STATE_MAP``, for the states the simulator has)."""
        if self.task_state == REBUILDING:
            return "REBUILD"
        if self.task_state == MIGRATING and self.vm_state in (ACTIVE,
                                                              PAUSED):
            return "MIGRATING"
        if self.task_state in RESIZE_TASKS and self.vm_state in (ACTIVE,
                                                                 STOPPED):
            return "RESIZE"
        return _STATUS.get(self.vm_state, "UNKNOWN")


class Migration:
    def __init__(self, mid, muuid, server, dest, now,
                 migration_type="evacuation", status="accepted"):
        self.id = mid
        self.uuid = muuid
        self.instance_uuid = server.id
        self.source_compute = server.host
        self.dest_compute = dest
        self.status = status
        self.migration_type = migration_type
        self.created_at = now
        self.updated_at = None
        self.project_id = server.project_id
        self.user_id = server.user_id
        # A live migration's progress, as the source's libvirt reports it
        # (GET /servers/{id}/migrations): bytes.
        self.memory_total = self.memory_remaining = None
        self.disk_total = self.disk_remaining = None
        #: what the move needs to finish it (model_moves.py)
        self.move = None
