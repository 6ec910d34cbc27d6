"""The simulated cloud's state: hosts, their BMCs, compute services, servers
and evacuation migrations.

Pure Python, one lock, no threads. Time comes from an injected clock and the
world advances lazily: every public call first runs the timed events that are
due (``_advance``), in time order, so a unit test with a fake clock sees
exactly what a wall-clock run would, without sleeping.

The rules follow Nova (read from its source, not copied):

* a service is down when forced down or when its last heartbeat is older
  than ``service_down_time`` (servicegroup DB driver);
* evacuate needs vm_state active, stopped or error and a source service
  that is not up (compute/api.py) — otherwise 409 / 400 "Compute service
  of HOST is still in use."; it does *not* check the task state
  (``check_instance_state(task_state=None)``): a server stuck in
  ``rebuilding`` can be evacuated again;
* migrations go ``accepted`` → ``pre-migrating`` → ``done``, or ``error``
  when the scheduler finds no host (the server then goes to vm_state error
  with a NoValidHost fault, conductor/manager.py). The conductor works on
  the instance's *oldest* ``accepted`` migration
  (``Migration.get_by_instance_and_status``), not necessarily the one the
  request created;
* the conductor casts the rebuild to the chosen host's compute. A compute
  that is dead by then never takes it: the migration stays ``accepted``
  with no destination and the server stays ``rebuilding`` on its source
  (nothing in Nova times it out); the message waits in the host's queue and
  runs when its compute starts again (after the start-up cleanup). The
  compute claims (``pre-migrating``, destination set), rebuilds, then sets
  the server's host and ``done``; a compute that dies in between leaves the
  migration ``pre-migrating`` and the server ``rebuilding`` on its source. A
  late rebuild finding the server's task state changed fails the migration
  and leaves the server vm_state ``error`` (task state still rebuilding):
  what a returning host does to a server evacuated elsewhere meanwhile
  (compute/manager.py ``rebuild_instance``, verified on Nova 34);
* a compute service that starts marks evacuations from its host in
  ``accepted``/``pre-migrating``/``done`` as ``completed``
  (compute/manager.py ``_destroy_evacuated_instances``);
* unsetting forced_down is refused while evacuations from the host are
  ``done`` (api/openstack/compute/services.py ``_check_for_evacuations``).

Live and cold migrations (a planned drain's moves) are model_moves.py's;
servers booted and deleted, compute services deleted and hosts leaving
aggregates (a smoke test, a decommission) model_builds.py's.
"""

import collections
import heapq
import itertools
import math
import threading
import time

from instanceha.sim import invariant
from instanceha.sim.model_builds import Builds
from instanceha.sim.model_moves import Moves
from instanceha.sim.model_repair import Repairs
from instanceha.sim.records import (  # noqa: F401  (re-exported)
    ACTIVE, BadRequest, CLEANUP_STATUSES, Conflict, ERROR, Host, MIGRATING,
    Migration, NotFound, PAUSED, POWER_RUNNING, POWER_SHUTDOWN, REBUILDING,
    RESIZED, RESOURCES, STOPPED, Server, SimError, stable_uuid)

SCHEDULER, CONDUCTOR = "nova-scheduler", "nova-conductor"


class ControlService:
    """A nova-scheduler or nova-conductor process on a controller: its own
    heartbeat (``SimCloud.heartbeat`` and ``service_up`` read it as they
    read a compute's), killed and started again; no BMC, no servers."""

    def __init__(self, binary, host, service_id, seed, now):
        self.binary = binary
        self.name = host
        self.service_id = service_id
        self.service_uuid = stable_uuid(seed, "service", binary, host)
        self.alive = True
        self.started_at = now
        self.frozen_heartbeat = now
        self.forced_down = False
        self.disabled = False
        self.disabled_reason = None
        self.service_updated = now


class SimCloud(Moves, Builds, Repairs):
    """A small Nova + BMC world. All parameters have demo-friendly defaults."""

    def __init__(self, hosts=6, servers_per_host=5, host_vcpus=64,
                 server_vcpus=2, report_interval=1.0, service_down_time=4.0,
                 evacuation_time=0.5, schedule_time=0.05, boot_time=2.0,
                 power_delay=0.0, api_latency=0.0, host_prefix="compute-",
                 seed=0, clock=time.time, username="admin",
                 password="secret", project="admin", region="RegionOne",
                 evacuate_checks_task_state=False, aggregates=None,
                 api_max_limit=1000, host_ram_mb=262144, host_disk_gb=4000,
                 server_ram_mb=2048, server_disk_gb=20,
                 allocation_ratios=None, reserved=None,
                 live_migration_time=1.0, cold_migration_time=1.0,
                 migration_monitor_interval=5.0, server_boot_time=1.0,
                 disabled_prefilter=True):
        self.clock = clock
        #: Nova's [api] max_limit: the most items one page of a paged list
        #: (servers, os-migrations from 2.59) carries
        self.api_max_limit = int(api_max_limit)
        if self.api_max_limit < 1:
            raise ValueError("api_max_limit must be at least 1")
        #: True: refuse evacuate while a task is in progress (not Nova 34).
        self.evacuate_checks_task_state = bool(evacuate_checks_task_state)
        self.report_interval = float(report_interval)
        self.service_down_time = float(service_down_time)
        self.evacuation_time = float(evacuation_time)
        self.schedule_time = float(schedule_time)
        self.boot_time = float(boot_time)
        self.power_delay = float(power_delay)
        self.api_latency = float(api_latency)
        self.seed = seed
        self.username, self.password = username, password
        self.project, self.region = project, region
        self.project_id = stable_uuid(seed, "project", project).replace(
            "-", "")
        self.user_id = stable_uuid(seed, "user", username).replace("-", "")
        self.lock = threading.RLock()
        self._events = []
        self._seq = itertools.count()
        self._migration_ids = itertools.count(1)
        self._now = clock()
        now = self._now
        self.hosts = {}
        self.servers = {}
        self.migrations = []
        #: host -> casts to its compute while it was dead (rebuilds,
        #: builds): (function, args), run when it starts
        self.rpc_queues = {}
        #: server id -> its instance actions, oldest first (os-instance-actions)
        self.actions = {}
        #: server id -> destinations rebuilding it right now
        self.rebuilding = {}
        #: (time, server id, hosts) each time a server was rebuilt on two
        #: hosts at once: a double evacuation, which must never happen
        self.double_rebuilds = []
        #: server id -> evacuate requests Nova accepted for it (the
        #: crash-safety tests count duplicates here, at Nova's side)
        self.evacuate_calls = collections.Counter()
        #: os-resetState calls: (time, server id, state)
        self.resets = []
        #: every evacuate request that reached the Nova API, with the power
        #: state of the server's host at that instant
        #: (invariant.EvacuateRequest; see note_evacuate_request)
        self.evacuate_requests = []
        #: host -> when it lost power together with its BMC (lose_power)
        self.power_lost = {}
        #: (time, host, action) of each reset by a host's watchdog chip
        self.watchdog_resets = []
        #: (host name, now) -> whether the host's watchdog deadline has
        #: passed (sim/agents.py installs it when its agents have
        #: watchdogs); the invariant asks it for a host whose BMC cannot
        #: answer. None: such a host is never proven off.
        self.watchdog_proof = None
        #: where this cloud's records say they come from (SimServer sets
        #: its URL)
        self.where = "simulator"
        #: Placement inventory per host: {resource class: ratio / reserved}
        #: (Nova's defaults there are 1.0 and 0 once the initial ratios
        #: are set; the scheduler counts (total - reserved) * ratio)
        self.allocation_ratios = dict.fromkeys(RESOURCES, 1.0)
        self.allocation_ratios.update(allocation_ratios or {})
        self.reserved = dict.fromkeys(RESOURCES, 0)
        self.reserved.update(reserved or {})
        #: Glance images: id -> {name, properties, tags, created, updated};
        #: every server boots from the default one unless set_server_image
        self.images = {}
        self.default_image = self._new_image(
            stable_uuid(seed, "image", "cirros"), "cirros-sim", now)
        #: False: the Keystone catalog names no image service
        self.image_endpoint = True
        #: every server's flavor (its extra specs: a recovery policy's)
        self.flavor_name = "m1.sim"
        self.flavor_extra_specs = {}
        #: [stage, count]: the next ``count`` destinations die at ``stage``
        self.doomed = []
        #: migration id -> the host the scheduler claimed for it
        self._placed = {}
        self._init_moves(live_migration_time, cold_migration_time,
                         migration_monitor_interval)
        self._init_builds(server_boot_time, disabled_prefilter,
                          server_vcpus, int(server_ram_mb),
                          int(server_disk_gb))
        self._init_repair()
        for i in range(hosts):
            name = "%s%d" % (host_prefix, i)
            self.hosts[name] = Host(name, i, seed, host_vcpus, now,
                                    int(host_ram_mb), int(host_disk_gb))
        #: host aggregates: name -> {id, uuid, hosts, availability_zone,
        #: created}; a host's zone is its aggregate's, else "nova"
        self.aggregates = {}
        for i, (aname, spec) in enumerate(sorted((aggregates or {}).items()),
                                          1):
            unknown = [h for h in spec.get("hosts", ()) if h not in self.hosts]
            if unknown:
                raise ValueError("aggregate %s: unknown host %s"
                                 % (aname, unknown[0]))
            self.aggregates[aname] = dict(
                id=i, uuid=stable_uuid(seed, "aggregate", aname),
                hosts=list(spec.get("hosts", ())),
                availability_zone=spec.get("availability_zone"), created=now)
        for name in self.hosts:
            for j in range(servers_per_host):
                sname = "%s-vm-%d" % (name, j)
                sid = stable_uuid(seed, "server", sname)
                self.servers[sid] = Server(
                    sid, sname, name, self.project_id, self.user_id,
                    server_vcpus, now, int(server_ram_mb),
                    int(server_disk_gb), self.default_image)
        #: host -> (ids of its servers, their summed resources): an index
        #: so that a host's servers and usage are found without reading
        #: every server of the cloud (a 20,000-host benchmark reads them
        #: for every host). _rebuilt is the only place a server changes
        #: host; a server removed from ``servers`` from outside (a test)
        #: changes its length, and the index is built again (_resident).
        self._resident_index = None
        self._resident_count = -1
        self._order = {}                # server id -> place in servers
        # Nova's control plane: a scheduler and a conductor with their own
        # heartbeats (add_control_service for more), Placement, the API
        # itself. See kill_service, set_placement, fail_api.
        self.control = []
        self.placement_reachable = True
        self.api_failure = None     # Nova's API answers 500 with this
        for binary in (SCHEDULER, CONDUCTOR):
            self.add_control_service(binary, "controller-0")

    # -- time ---------------------------------------------------------------

    def _at(self, when, func, *args):
        heapq.heappush(self._events, (when, next(self._seq), func, args))

    def _advance(self):
        now = self.clock()
        while self._events and self._events[0][0] <= now:
            when, _, func, args = heapq.heappop(self._events)
            self._now = max(self._now, when)
            if func == self._schedule and self._control_plane_holds(args):
                continue
            func(*args)
        self._now = max(self._now, now)
        return self._now

    def now(self):
        with self.lock:
            return self._advance()

    # -- lookups ------------------------------------------------------------

    def _host(self, name):
        try:
            return self.hosts[name]
        except KeyError:
            raise NotFound("Compute host %s not found." % name)

    def _server(self, sid):
        try:
            return self.servers[sid]
        except KeyError:
            raise NotFound("Instance %s could not be found." % sid)

    def host(self, name):
        with self.lock:
            self._advance()
            return self._host(name)

    def heartbeat(self, h):
        """Time of the service's last heartbeat (Nova's updated_at), as
        stamped by the clock of its writer (set_writer_offset)."""
        if not h.alive:
            return h.frozen_heartbeat
        beats = math.floor((self._now - h.started_at) / self.report_interval)
        return (h.started_at + max(beats, 0) * self.report_interval
                + getattr(h, "writer_offset", 0.0))

    def set_writer_offset(self, seconds, host=None, binary="nova-compute"):
        """From now on, stamp the heartbeats of ``binary`` on ``host``
        (every host running it when None) with a clock ``seconds`` ahead
        of Nova's (negative: behind): a nova-conductor without NTP stamps
        so the heartbeats it writes. Nova's API still judges up and down
        on its own clock, against the stamped time."""
        with self.lock:
            self._advance()
            if binary == "nova-compute":
                found = [self._host(host)] if host is not None \
                    else list(self.hosts.values())
            else:
                found = self._control(binary, host)
            for h in found:
                h.writer_offset = float(seconds)

    def service_up(self, h):
        if h.forced_down:
            return False
        return abs(self._now - self.heartbeat(h)) <= self.service_down_time

    # -- where the servers are ---------------------------------------------

    def _resident(self):
        """host -> [set of its server ids, {resource class: sum}]."""
        if self._resident_count != len(self.servers):
            index = {}
            for s in self.servers.values():
                entry = index.setdefault(
                    s.host, [set(), dict.fromkeys(RESOURCES, 0)])
                entry[0].add(s.id)
                for rc, amount in s.resources().items():
                    entry[1][rc] += amount
            self._resident_index = index
            self._resident_count = len(self.servers)
            self._order = {sid: i for i, sid in enumerate(self.servers)}
        return self._resident_index

    def _servers_on(self, name):
        """The servers whose host is ``name``, in the order of
        ``servers``."""
        entry = self._resident().get(name)
        if not entry:
            return []
        order = self._order
        return sorted((self.servers[sid] for sid in entry[0]),
                      key=lambda s: order[s.id])

    def _move(self, s, dest):
        """Server ``s`` now runs on host ``dest`` (the index follows)."""
        index = self._resident()
        old = index.get(s.host)
        if old is not None:
            old[0].discard(s.id)
            for rc, amount in s.resources().items():
                old[1][rc] -= amount
        new = index.setdefault(dest, [set(), dict.fromkeys(RESOURCES, 0)])
        new[0].add(s.id)
        for rc, amount in s.resources().items():
            new[1][rc] += amount
        s.host = dest

    def _claims(self):
        """host -> the servers Placement still counts there though they
        are not its servers: an evacuated server's allocation stays on its
        source until that compute starts and cleans up (``done``
        migrations: Nova removes it in ``_destroy_evacuated_instances``);
        the scheduler's claim on a destination holds from its choice until
        the rebuild ends."""
        out = {}
        for m in self.migrations:
            if m.migration_type != "evacuation":
                continue
            s = self.servers.get(m.instance_uuid)
            if s is None:
                continue                # deleted: its allocation is gone
            if m.status in ("accepted", "pre-migrating"):
                where = self._placed.get(m.id)
            elif m.status == "done":
                where = m.source_compute
            else:
                continue
            if where is not None and s.host != where:
                out.setdefault(where, []).append(s)
        return self.build_claims(self.move_claims(out))

    def _used_vcpus(self, name):
        return self.usage(name)["VCPU"]

    def usage(self, name, claims=None):
        """Placement's usages of host ``name``: {resource class: amount}:
        its servers' and the claims on it (``_claims``; pass them when
        asking for many hosts: they are read from every migration)."""
        entry = self._resident().get(name)
        used = dict(entry[1]) if entry else dict.fromkeys(RESOURCES, 0)
        if claims is None:
            claims = self._claims()
        for server in claims.get(name, ()):
            for rc, amount in server.resources().items():
                used[rc] += amount
        return used

    def capacity(self, h):
        """Placement's usable amounts of host ``h``: (total - reserved) *
        allocation_ratio per resource class."""
        totals = {"VCPU": h.vcpus, "MEMORY_MB": h.ram_mb,
                  "DISK_GB": h.disk_gb}
        return {rc: int((totals[rc] - self.reserved[rc])
                        * self.allocation_ratios[rc]) for rc in RESOURCES}

    def inventories(self, name):
        """Placement's inventories of host ``name``."""
        with self.lock:
            self._advance()
            h = self._host(name)
            totals = {"VCPU": h.vcpus, "MEMORY_MB": h.ram_mb,
                      "DISK_GB": h.disk_gb}
            return {rc: {"total": totals[rc], "reserved": self.reserved[rc],
                         "min_unit": 1, "max_unit": totals[rc],
                         "step_size": 1,
                         "allocation_ratio": self.allocation_ratios[rc]}
                    for rc in RESOURCES}

    def usages(self, name):
        with self.lock:
            self._advance()
            self._host(name)
            return self.usage(name)

    # -- compute process and power -------------------------------------------

    def _stop_process(self, h):
        if h.alive:
            h.frozen_heartbeat = self.heartbeat(h)
            h.alive = False
        h.boot_generation += 1      # cancels a boot in progress
        self.moves_host_lost(h.name)

    def kill(self, name):
        """The host dies with its power on (a kernel hang, say): its
        nova-compute stops, and so does everything else on it (its
        heartbeat agent, sim/agents.py); its BMC still reads On. Only a
        power off (or cycle) brings it back. Nova sees what it saw of a
        crashed nova-compute: ``kill_compute`` is that alone."""
        with self.lock:
            self._advance()
            h = self._host(name)
            self._stop_process(h)
            h.hung = True

    def kill_compute(self, name):
        """Only the nova-compute process crashes; the host and the rest of
        it (its heartbeat agent) go on. ``restart_compute`` starts it
        again."""
        with self.lock:
            self._advance()
            self._stop_process(self._host(name))

    def restart_compute(self, name, delay=None):
        """``systemctl restart`` of the host's nova-compute: stopped if it
        runs, running again ``delay`` seconds later (``boot_time`` by
        default: its start-up, cleanup included, as after a boot). Returns
        False (nothing done) when the host is off or hung."""
        with self.lock:
            self._advance()
            h = self._host(name)
            if not h.power_on or h.hung:
                return False
            self._stop_process(h)           # also cancels a start pending
            delay = self.boot_time if delay is None else float(delay)
            self._at(self._now + delay, self._boot, h, h.boot_generation)
            return True

    def boot_id(self, h):
        """The kernel's boot id of host ``h``: a new one at every boot."""
        return stable_uuid(self.seed, "boot", h.name, str(h.boots))

    def os_running(self, h):
        """Whether host ``h``'s operating system runs (powered, not
        hung): what its heartbeat agent needs to beat."""
        return h.power_on and not h.hung

    def running_guests(self, name):
        """How many servers run on host ``name`` as its libvirt would
        count them: those Nova places there, active or paused, not being
        rebuilt (a server live-migrating runs on its source until the
        switch-over), and those cold-migrated there awaiting confirmation
        with their guest running. (After a reboot Nova still shows them
        active; so does this.)"""
        entry = self._resident().get(name)
        if not entry:
            return 0
        return sum(1 for sid in entry[0]
                   if _guest_runs(self.servers[sid]))

    def power(self, name, on):
        """Ask the host's BMC for power on/off (applied after power_delay)."""
        with self.lock:
            self._advance()
            h = self._host(name)
            h.power_generation += 1
            if self.power_delay > 0:
                h.pending_power = bool(on)
                self._at(self._now + self.power_delay, self._apply_power,
                         h, bool(on), h.power_generation)
            else:
                self._apply_power(h, bool(on), h.power_generation)

    def lose_power(self, name):
        """The host loses power together with its BMC (a chassis or PDU
        failure): it stops at once, its agent and its watchdog with it,
        and its BMC answers nothing (requests naming it are dropped);
        nothing of it answers until :meth:`restore_power`."""
        with self.lock:
            self._advance()
            h = self._host(name)
            h.bmc_reachable = False
            self.power_lost[name] = self._now
            h.power_generation += 1
            h.pending_power = None
            self._apply_power(h, False, h.power_generation)

    def restore_power(self, name):
        """Power is back: the BMC answers again; the host stays off until
        someone powers it on."""
        with self.lock:
            self._advance()
            h = self._host(name)
            h.bmc_reachable = True
            self.power_lost.pop(name, None)

    def watchdog_reset(self, name, power_off=False):
        """The host's watchdog chip fired: a hardware reset (off, then on
        at once: a new boot), or with ``power_off`` it stays off. Counted
        in ``watchdog_resets``."""
        with self.lock:
            self._advance()
            h = self._host(name)
            self.watchdog_resets.append(
                (self._now, name, "off" if power_off else "reboot"))
            h.power_generation += 1
            gen = h.power_generation
            h.pending_power = None
            self._apply_power(h, False, gen)
            if not power_off:
                self._apply_power(h, True, gen)

    def power_cycle(self, name):
        """Off then on (Redfish ForceRestart)."""
        with self.lock:
            self._advance()
            h = self._host(name)
            h.power_generation += 1
            gen = h.power_generation
            h.pending_power = True if self.power_delay > 0 else None
            self._apply_power(h, False, gen, keep_pending=True)
            if self.power_delay > 0:
                self._at(self._now + self.power_delay, self._apply_power,
                         h, True, gen)
            else:
                self._apply_power(h, True, gen)

    @staticmethod
    def power_state(h):
        """Host ``h``'s power as its BMC reports it: On, Off, PoweringOn,
        PoweringOff (a change asked for, power_delay not over)."""
        if h.pending_power is False and h.power_on:
            return "PoweringOff"
        if h.pending_power is True and not h.power_on:
            return "PoweringOn"
        return "On" if h.power_on else "Off"

    def _apply_power(self, h, on, generation, keep_pending=False):
        if generation != h.power_generation:
            return
        if not keep_pending:
            h.pending_power = None
        if not on:
            h.power_on = False
            h.hung = False
            self._stop_process(h)
        elif not h.power_on:
            h.power_on = True
            h.boots += 1
            h.booted_at = self._now
            h.boot_generation += 1
            self._at(self._now + self.boot_time, self._boot, h,
                     h.boot_generation)

    def _boot(self, h, generation):
        if generation != h.boot_generation or not h.power_on:
            return
        h.alive = True
        h.started_at = self._now
        if not h.hold_cleanup:
            self._cleanup(h)
        self.builds_host_started(h)
        # Start-up (init_host) is over: the compute consumes what waited.
        for func, args in self.rpc_queues.pop(h.name, []):
            func(*args)

    def _cleanup(self, h):
        # What nova-compute does at start for evacuations away from it.
        for m in self.migrations:
            if (m.source_compute == h.name and m.status in CLEANUP_STATUSES
                    and m.migration_type == "evacuation"):
                self._set_migration(m, "completed")

    def hold_cleanup(self, name, hold=True):
        """``hold=True``: the host's compute will start without cleaning up
        its evacuations (they stay ``done``). ``hold=False``: release; if
        the compute is running, it cleans up now."""
        with self.lock:
            self._advance()
            h = self._host(name)
            h.hold_cleanup = bool(hold)
            if not hold and h.alive:
                self._cleanup(h)

    def set_bmc(self, name, reachable=None, refuse_power_off=None,
                password=None):
        """``password``: the BMC's new password (rotated behind the
        inventory's back)."""
        with self.lock:
            self._advance()
            h = self._host(name)
            if password is not None:
                h.bmc_password = str(password)
            if reachable is not None:
                h.bmc_reachable = bool(reachable)
            if refuse_power_off is not None:
                h.bmc_refuse_power_off = bool(refuse_power_off)

    def bmc_host_for(self, username, password):
        """The host whose BMC credentials these are, or None."""
        with self.lock:
            # Fast path: each host's user name is its own (Host), unless
            # someone changed it; then every host is looked at.
            prefix = "admin-"
            if isinstance(username, str) and username.startswith(prefix):
                h = self.hosts.get(username[len(prefix):])
                if h is not None and h.bmc_username == username \
                        and h.bmc_password == password:
                    return h
            for h in self.hosts.values():
                if h.bmc_username == username and h.bmc_password == password:
                    return h
            return None

    # -- services ------------------------------------------------------------

    def service_by_uuid(self, service_uuid):
        with self.lock:
            self._advance()
            for h in self.computes():
                if h.service_uuid == service_uuid:
                    return h
            raise NotFound("Service %s could not be found." % service_uuid)

    def update_service(self, service_uuid, status=None, disabled_reason=None,
                       forced_down=None):
        """Apply a 2.53-style service update; the caller validated types."""
        with self.lock:
            h = self.service_by_uuid(service_uuid)
            if status is None and forced_down is None:
                raise BadRequest("No updates were requested. Fields 'status' "
                                 "or 'forced_down' should be specified.")
            if status == "enabled" and disabled_reason:
                raise BadRequest("Specifying 'disabled_reason' with status "
                                 "'enabled' is invalid.")
            if forced_down is False:
                self._check_for_evacuations(h.name)
            if status == "enabled":
                h.disabled, h.disabled_reason = False, None
            elif status == "disabled":
                h.disabled, h.disabled_reason = True, disabled_reason
            if forced_down is not None:
                h.forced_down = bool(forced_down)
            h.service_updated = self._now
            return h

    def _check_for_evacuations(self, name):
        if any(m.source_compute == name and m.status == "done"
               and m.migration_type == "evacuation" for m in self.migrations):
            raise BadRequest(
                "Unable to force up host %s as `done` evacuation migration "
                "records remain associated with the host. Ensure the compute "
                "service has been restarted, allowing these records to move "
                "to `completed` before retrying this request." % name)

    # -- control plane --------------------------------------------------------

    def add_control_service(self, binary, host):
        """Run ``binary`` (nova-scheduler, nova-conductor) on ``host`` too."""
        with self.lock:
            now = self._advance()
            c = ControlService(binary, host,
                               len(self.hosts) + len(self.control) + 1,
                               self.seed, now)
            self.control.append(c)
            return c

    def _control(self, binary, host=None):
        found = [c for c in self.control if c.binary == binary
                 and (host is None or c.name == host)]
        if not found:
            raise NotFound("Could not find binary %s on host %s."
                           % (binary, host or "any"))
        return found

    def kill_service(self, binary, host=None):
        """Stop ``binary`` on ``host``, or on every controller running it:
        its heartbeat stops and Nova reports it down after
        service_down_time."""
        with self.lock:
            self._advance()
            for c in self._control(binary, host):
                if c.alive:
                    c.frozen_heartbeat = self.heartbeat(c)
                    c.alive = False

    def start_service(self, binary, host=None):
        """Start ``binary`` again on ``host`` (or wherever it runs)."""
        with self.lock:
            self._advance()
            for c in self._control(binary, host):
                if not c.alive:
                    c.alive, c.started_at = True, self._now

    def set_placement(self, reachable):
        """Placement answers (True) or drops every connection (False); the
        scheduler then finds no allocation candidates (NoValidHost)."""
        with self.lock:
            self._advance()
            self.placement_reachable = bool(reachable)

    def fail_api(self, message="Unexpected API Error."):
        """Every request to Nova's API gets HTTP 500 with ``message`` (its
        database gone, say); ``None``: it answers again."""
        with self.lock:
            self._advance()
            self.api_failure = message

    def _control_up(self, binary):
        """Whether some ``binary`` runs (True when the cloud has none)."""
        found = [c for c in self.control if c.binary == binary]
        return not found or any(c.alive for c in found)

    def _control_plane_holds(self, args):
        """Whether a due ``_schedule(*args)`` cannot run yet: with no
        conductor the API's cast waits in the conductor's queue (tried
        again a report_interval later); with no scheduler the conductor's
        select_destinations times out and, for a rebuild, Nova handles no
        MessagingTimeout: the server stays rebuilding and its migration
        accepted until an operator resets it."""
        if not self._control_up(CONDUCTOR):
            self._at(self._now + self.report_interval, self._schedule, *args)
            return True
        return not self._control_up(SCHEDULER)

    def zone_of(self, host):
        """Nova's availability zone of ``host``: that of an aggregate with
        one that holds it, else the default zone."""
        for agg in self.aggregates.values():
            if host in agg["hosts"] and agg["availability_zone"]:
                return agg["availability_zone"]
        return "nova"

    def list_aggregates(self):
        with self.lock:
            return [dict(a, name=n, hosts=list(a["hosts"]))
                    for n, a in sorted(self.aggregates.items())]

    def stop_server(self, server_id):
        """os-stop: Nova's compute API refuses it (409) unless the server
        is active (or in error) with no task running; the guest is then
        powered off at once (the simulator does not time it)."""
        with self.lock:
            self._advance()
            s = self._server(server_id)
            if s.vm_state not in (ACTIVE, ERROR) or s.task_state is not None:
                raise Conflict("Cannot 'stop' instance %s while it is in "
                               "vm_state %s" % (server_id, s.vm_state))
            host = self.hosts.get(s.host)
            if host is None or not host.alive:
                raise Conflict("Compute service of %s is unavailable at "
                               "this time." % s.host)
            old = s.vm_state
            s.task_state = "powering-off"
            self._record(s, "stop", self.user_id)
            self._notify_update(s, old, None, self.user_id, s.project_id)
            self._notify("instance.power_off.start", s, self.user_id,
                         s.project_id)
            s.vm_state, s.power_state = STOPPED, POWER_SHUTDOWN
            s.task_state = None
            s.updated = self._now
            self._notify_update(s, old, "powering-off", self.user_id,
                                s.project_id)
            self._notify("instance.power_off.end", s, self.user_id,
                         s.project_id)

    def set_metadata(self, server_id, metadata=None, tags=None):
        """Server metadata and tags, as an owner or operator sets them."""
        with self.lock:
            s = self._server(server_id)
            if metadata is not None:
                s.metadata = dict(metadata)
            if tags is not None:
                s.tags = list(tags)
            s.updated = self._now

    def set_aggregate_metadata(self, name, metadata):
        with self.lock:
            self.aggregates[name]["metadata"] = dict(metadata)

    def _aggregate_by_id(self, aggregate_id):
        for name, agg in self.aggregates.items():
            if str(agg["id"]) == str(aggregate_id):
                return name, agg
        raise NotFound("Aggregate %s could not be found." % aggregate_id)

    def update_aggregate_metadata(self, aggregate_id, changes):
        """os-aggregates set_metadata: each key set to its value, or
        removed when the value is None (a missing key removed is no
        error, as in Nova); ``availability_zone`` is the zone. Returns the
        aggregate as list_aggregates shows it."""
        with self.lock:
            self._advance()
            name, agg = self._aggregate_by_id(aggregate_id)
            metadata = dict(agg.get("metadata") or {})
            for key, value in changes.items():
                if key == "availability_zone":
                    agg["availability_zone"] = value
                elif value is None:
                    metadata.pop(key, None)
                else:
                    metadata[key] = value
            agg["metadata"] = metadata
            agg["updated"] = self._now
            return dict(agg, name=name, hosts=list(agg["hosts"]))

    def delete_server_metadata(self, server_id, key):
        """DELETE /servers/{id}/metadata/{key}: 404 when the key is not
        there."""
        with self.lock:
            self._advance()
            s = self._server(server_id)
            if key not in s.metadata:
                raise NotFound("Metadata item was not found")
            del s.metadata[key]
            s.updated = self._now

    # -- Glance ----------------------------------------------------------------

    def _new_image(self, image_id, name, now):
        self.images[image_id] = {"id": image_id, "name": name,
                                 "properties": {}, "tags": [],
                                 "created": now, "updated": now}
        return image_id

    def set_image(self, image_id=None, name=None, properties=None,
                  tags=None):
        """Create an image (``image_id`` None or unknown) or update one:
        ``properties`` replaces its custom properties, ``tags`` its tags.
        Returns its id."""
        with self.lock:
            now = self._advance()
            if image_id is None:
                image_id = stable_uuid(self.seed, "image",
                                       str(len(self.images)))
            if image_id not in self.images:
                self._new_image(image_id, name or "image-%s" % image_id[:8],
                                now)
            img = self.images[image_id]
            if name is not None:
                img["name"] = name
            if properties is not None:
                img["properties"] = dict(properties)
            if tags is not None:
                img["tags"] = list(tags)
            img["updated"] = now
            return image_id

    def get_image(self, image_id):
        with self.lock:
            try:
                img = self.images[image_id]
            except KeyError:
                raise NotFound("No image found with ID %s" % image_id)
            return dict(img, properties=dict(img["properties"]),
                        tags=list(img["tags"]))

    def set_server_image(self, server_id, image_id):
        """The image the server was booted from (it need not exist in
        Glance any more: Nova keeps the id)."""
        with self.lock:
            self._server(server_id).image_id = image_id

    def reset_state(self, server_id, state):
        """os-resetState: vm_state ``state``, task state cleared."""
        with self.lock:
            self._advance()
            s = self._server(server_id)
            s.vm_state = ACTIVE if state == "active" else ERROR
            s.task_state = None
            s.updated = self._now
            self.resets.append((self._now, server_id, state))

    # -- evacuation ----------------------------------------------------------

    def evacuate(self, server_id, host=None, force=False, stop=False):
        """Start an evacuation like Nova's API; returns the Migration.

        ``stop`` is Nova's target_state=stopped (microversion >= 2.95);
        a server in error arrives ACTIVE all the same.
        """
        with self.lock:
            self._advance()
            s = self._server(server_id)
            if host is not None:
                if self._host(host).service_deleted:
                    raise NotFound("Compute host %s not found." % host)
                if s.host == host:
                    raise BadRequest("The target host can't be the same one.")
            if s.vm_state not in (ACTIVE, STOPPED, ERROR):
                raise Conflict("Cannot 'evacuate' instance %s while it is in "
                               "vm_state %s" % (server_id, s.vm_state))
            if s.task_state is not None and self.evacuate_checks_task_state:
                raise Conflict("Cannot 'evacuate' instance %s while it is in "
                               "task_state %s" % (server_id, s.task_state))
            source = self._host(s.host)
            if self.service_up(source):
                raise BadRequest("Compute service of %s is still in use."
                                 % s.host)
            s.task_state = REBUILDING
            s.updated = self._now
            self.evacuate_calls[s.id] += 1
            m = Migration(next(self._migration_ids),
                          stable_uuid(self.seed, "migration", s.id,
                                       str(len(self.migrations))),
                          s, host, self._now)
            self.migrations.append(m)
            action = {"action": "evacuate", "request_id": "req-" + stable_uuid(
                self.seed, "request", m.uuid), "start_time": self._now,
                "events": []}
            self.actions.setdefault(s.id, []).append(action)
            self._at(self._now + self.schedule_time, self._schedule, m,
                     host if force else None, host, stop, action)
            return m

    def note_evacuate_request(self, server_id):
        """Record an evacuate request for ``server_id`` that reached Nova's
        API, before Nova looks at it: the server's current host and that
        host's power state now (what the Redfish front end would answer).
        Returns the record (its ``answer`` is the caller's to fill), or
        None for a server that does not exist (it has no host)."""
        with self.lock:
            now = self._advance()
            s = self.servers.get(server_id)
            if s is None:
                return None
            h = self.hosts.get(s.host)
            power = invariant.UNKNOWN if h is None else self.power_state(h)
            note = None
            if h is not None and not h.bmc_reachable and power == "Off":
                # Nobody can read this host's power: it is off only as
                # far as its watchdog's deadline proves it.
                proof = self.watchdog_proof
                if proof is None or not proof(h.name, now):
                    power = invariant.UNKNOWN
                    note = ("its BMC does not answer, and its watchdog "
                            "deadline had not passed")
            record = invariant.EvacuateRequest(now, s.id, s.host, power,
                                               self.where, note=note)
            self.evacuate_requests.append(record)
        invariant.publish(record)
        return record

    def unsafe_evacuate_requests(self):
        """The evacuate requests that arrived while the server's host was
        not powered off (the invariant's violations)."""
        with self.lock:
            return invariant.unsafe(self.evacuate_requests)

    def kill_next_destinations(self, count=1, stage="cast"):
        """The compute of each of the next ``count`` evacuation
        destinations dies: ``stage`` "cast" as the conductor sends it the
        rebuild (it never takes it: a host dying in the same storm, not yet
        seen down), "claim" once it has claimed the server and started
        rebuilding (it dies during the rebuild)."""
        if stage not in ("cast", "claim"):
            raise ValueError("stage must be 'cast' or 'claim'")
        with self.lock:
            self._advance()
            self.doomed.append([stage, int(count)])

    def _doom(self, stage, h):
        for entry in self.doomed:
            if entry[0] == stage and entry[1] > 0:
                entry[1] -= 1
                self._stop_process(h)
                return True
        return False

    def instance_actions(self, server_id):
        """The server's instance actions, newest first (copies)."""
        with self.lock:
            self._advance()
            self._server(server_id)
            return [dict(a, events=[dict(e) for e in a["events"]])
                    for a in reversed(self.actions.get(server_id, []))]

    @staticmethod
    def _event(action, name, host, at):
        ev = {"event": name, "host": host, "start_time": at,
              "finish_time": None, "result": None}
        action["events"].append(ev)
        return ev

    def _end_event(self, ev, ok):
        ev["finish_time"] = self._now
        ev["result"] = "Success" if ok else "Error"

    def _set_migration(self, m, status):
        m.status = status
        m.updated_at = self._now

    def _pick_host(self, server, source, requested):
        # Placement's allocation candidates (every resource class fits),
        # then the filters (enabled, up) and the least used host; a
        # requested host (evacuate with a host, not forced) goes through
        # the same checks.
        if not self.placement_reachable:
            return None     # no allocation candidates: NoValidHost
        candidates = []
        need = server.resources()
        claims = self._claims()
        usable_of = {}      # (vcpus, ram, disk) -> capacity: one per size
        for h in self.hosts.values():
            if h.name == source or h.disabled or h.service_deleted:
                continue
            if requested is not None and h.name != requested:
                continue
            size = (h.vcpus, h.ram_mb, h.disk_gb)
            usable = usable_of.get(size)
            if usable is None:
                usable = usable_of[size] = self.capacity(h)
            used = self.usage(h.name, claims)
            if all(usable[rc] - used[rc] >= need[rc] for rc in RESOURCES) \
                    and self.service_up(h):
                candidates.append((used["VCPU"], h.name))
        return min(candidates)[1] if candidates else None

    def _schedule(self, m, forced, requested, stop, action):
        # The conductor: it works on the oldest 'accepted' migration of the
        # instance, which after a stuck evacuation is not the new one.
        s = self.servers.get(m.instance_uuid)
        if s is None:
            self._set_migration(m, "error")     # deleted meanwhile
            return
        m = next((x for x in self.migrations
                  if x.instance_uuid == s.id and x.status == "accepted"
                  and x.migration_type == "evacuation"), m)
        ev = self._event(action, "rebuild_server", "conductor",
                         self._now)
        dest = forced or self._pick_host(s, m.source_compute, requested)
        if dest is None:
            self._set_migration(m, "error")
            s.vm_state, s.task_state = ERROR, None
            s.fault = {"code": 500, "created": self._now,
                       "message": "No valid host was found. There are not "
                                  "enough hosts available."}
            s.updated = self._now
            self._end_event(ev, False)
            return
        self._placed[m.id] = dest       # Placement: the scheduler's claim
        self._end_event(ev, True)
        h = self.hosts[dest]
        self._doom("cast", h)
        if h.alive:
            self._claim(m, dest, stop, action)
        else:
            self.rpc_queues.setdefault(dest, []).append(
                (self._claim, (m, dest, stop, action)))

    def _claim(self, m, dest, stop, action):
        # The destination compute: claim (the migration gets its
        # destination), then the rebuild, which expects the task state the
        # API set.
        s = self.servers.get(m.instance_uuid)
        if s is None:
            self._set_migration(m, "error")     # deleted meanwhile
            return
        h = self.hosts[dest]
        ev = self._event(action, "compute_rebuild_instance", dest, self._now)
        m.dest_compute = dest
        self._placed[m.id] = dest
        self._set_migration(m, "pre-migrating")
        if s.task_state != REBUILDING:
            # UnexpectedTaskStateError: the migration fails and the server
            # is set to error with the task state the rebuild wrote.
            self._set_migration(m, "failed")
            s.vm_state, s.task_state = ERROR, REBUILDING
            s.updated = self._now
            self._end_event(ev, False)
            return
        # A rebuild whose compute died is over: only live ones count.
        busy = {d for d in self.rebuilding.get(s.id, ())
                if self.hosts[d].alive}
        busy.add(dest)
        self.rebuilding[s.id] = busy
        if len(busy) > 1:
            self.double_rebuilds.append((self._now, s.id, sorted(busy)))
        if self._doom("claim", h):
            busy.discard(dest)
            return                      # died during the rebuild
        self._at(self._now + self.evacuation_time, self._rebuilt, m, dest,
                 stop, ev, s.vm_state, h.boot_generation)

    def _rebuilt(self, m, dest_name, stop, ev, orig_vm_state, generation):
        s = self.servers.get(m.instance_uuid)
        if s is None:
            return                      # deleted meanwhile
        dest = self.hosts[dest_name]
        self.rebuilding.get(s.id, set()).discard(dest_name)
        if not dest.alive or dest.boot_generation != generation:
            # The compute died during the rebuild: nothing finishes it; the
            # migration stays pre-migrating, the server rebuilding.
            return
        self._move(s, dest.name)
        s.task_state = None
        s.fault = None
        # Nova restores a stopped server's state at every microversion and
        # ignores the target state (2.95) for a server in error, which
        # comes up ACTIVE (compute/manager.py _do_rebuild_instance).
        if orig_vm_state == STOPPED or (stop and orig_vm_state != ERROR):
            s.vm_state, s.power_state = STOPPED, POWER_SHUTDOWN
        else:
            s.vm_state, s.power_state = ACTIVE, POWER_RUNNING
        s.updated = self._now
        self._set_migration(m, "done")
        self._end_event(ev, True)

    # -- reads ---------------------------------------------------------------

    def list_servers(self, host=None):
        with self.lock:
            self._advance()
            if host is None:
                return list(self.servers.values())
            return self._servers_on(host)

    def get_server(self, server_id):
        with self.lock:
            self._advance()
            return self._server(server_id)

    def list_migrations(self, changes_since=None, **filters):
        """Filters: migration_type, source_compute, host, status,
        instance_uuid (``host`` matches source or destination);
        ``changes_since`` (epoch seconds): Nova's, rows whose updated_at
        is at or after it (a row never updated has none: left out)."""
        with self.lock:
            self._advance()
            self.live_progress()
            result = []
            for m in self.migrations:
                if changes_since is not None and (
                        m.updated_at is None
                        or m.updated_at < changes_since):
                    continue
                if any(filters.get(k) not in (None, getattr(m, k))
                       for k in ("migration_type", "source_compute", "status",
                                 "instance_uuid")):
                    continue
                host = filters.get("host")
                if host and host not in (m.source_compute, m.dest_compute):
                    continue
                result.append(m)
            return sorted(result, key=lambda m: (m.created_at, m.id),
                          reverse=True)

    def snapshot(self):
        """A plain dict of the whole world, for assertions."""
        with self.lock:
            now = self._advance()
            self.live_progress()
            hosts, services = {}, {}
            claims = self._claims()
            for h in self.hosts.values():
                usage = self.usage(h.name, claims)
                hosts[h.name] = {
                    "power": "on" if h.power_on else "off",
                    "pending_power": h.pending_power,
                    "compute_alive": h.alive,
                    "hung": h.hung,
                    "boot_id": self.boot_id(h),
                    "hold_cleanup": h.hold_cleanup,
                    "bmc": {"reachable": h.bmc_reachable,
                            "refuse_power_off": h.bmc_refuse_power_off},
                    "vcpus": h.vcpus, "used_vcpus": usage["VCPU"],
                    "ram_mb": h.ram_mb, "disk_gb": h.disk_gb,
                    "usage": usage,
                    "service_deleted": h.service_deleted,
                    "failing_boots": self.failing_boots.get(h.name),
                }
                if h.service_deleted:
                    continue
                services[h.name] = {
                    "id": h.service_uuid, "host": h.name,
                    "binary": "nova-compute",
                    "status": "disabled" if h.disabled else "enabled",
                    "disabled_reason": h.disabled_reason,
                    "forced_down": h.forced_down,
                    "state": "up" if self.service_up(h) else "down",
                    "updated_at": self.heartbeat(h),
                }
            servers = {s.id: {"id": s.id, "name": s.name, "host": s.host,
                              "status": s.status, "vm_state": s.vm_state,
                              "task_state": s.task_state,
                              "fault": dict(s.fault) if s.fault else None}
                       for s in self.servers.values()}
            migrations = [{"id": m.id, "uuid": m.uuid,
                           "instance_uuid": m.instance_uuid,
                           "source_compute": m.source_compute,
                           "dest_compute": m.dest_compute,
                           "status": m.status,
                           "migration_type": m.migration_type,
                           "created_at": m.created_at,
                           "updated_at": m.updated_at,
                           "memory_total": m.memory_total,
                           "memory_remaining": m.memory_remaining}
                          for m in self.migrations]
            control = {"%s@%s" % (c.binary, c.name): {
                "id": c.service_uuid, "binary": c.binary, "host": c.name,
                "alive": c.alive,
                "state": "up" if self.service_up(c) else "down",
                "updated_at": self.heartbeat(c)} for c in self.control}
            return {"now": now, "hosts": hosts, "services": services,
                    "servers": servers, "migrations": migrations,
                    "control_services": control,
                    "evacuate_calls": dict(self.evacuate_calls),
                    "double_rebuilds": [list(d) for d in
                                        self.double_rebuilds],
                    "double_running": [list(d) for d in
                                       self.double_running],
                    "stalled_migrations": {
                        "servers": sorted(self.stalled_servers),
                        "hosts": sorted(self.stalled_hosts)},
                    "placement": {"reachable": self.placement_reachable},
                    "disabled_prefilter": self.disabled_prefilter,
                    "deleted_servers": [list(d) for d in
                                        self.deleted_servers],
                    "deleted_services": [list(d) for d in
                                         self.deleted_services],
                    "nova_api": {"failure": self.api_failure}}


def _guest_runs(s):
    """Whether server ``s``'s guest runs on its host (SimCloud
    running_guests)."""
    if s.vm_state in (ACTIVE, PAUSED):
        return s.task_state in (None, MIGRATING)
    return s.vm_state == RESIZED and s.power_state == POWER_RUNNING
