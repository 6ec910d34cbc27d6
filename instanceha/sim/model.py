"""The simulated cloud's state: hosts, their BMCs, compute services, servers
and evacuation migrations.

Pure Python, one lock, no threads. Time comes from an injected clock and the
world advances lazily: every public call first runs the timed events that are
due (``_advance``), in time order, so a unit test with a fake clock sees
exactly what a wall-clock run would, without sleeping.

The rules follow Nova (read from its source, not copied):

* a service is down when forced down or when its last heartbeat is older
  than ``service_down_time`` (servicegroup DB driver);
* evacuate needs a server with no task state and vm_state active, stopped or
  error, and a source service that is not up (compute/api.py) — otherwise
  409 / 400 "Compute service of HOST is still in use.";
* migrations go ``accepted`` → ``pre-migrating`` → ``done``, or ``error``
  when the scheduler finds no host (the server then goes to vm_state error
  with a NoValidHost fault, conductor/manager.py);
* a compute service that starts marks evacuations from its host in
  ``accepted``/``pre-migrating``/``done`` as ``completed``
  (compute/manager.py ``_destroy_evacuated_instances``);
* unsetting forced_down is refused while evacuations from the host are
  ``done`` (api/openstack/compute/services.py ``_check_for_evacuations``).
"""

import heapq
import itertools
import math
import threading
import time

from instanceha.sim.records import (  # noqa: F401  (re-exported)
    ACTIVE, BadRequest, CLEANUP_STATUSES, Conflict, ERROR, Host, Migration,
    NotFound, POWER_RUNNING, POWER_SHUTDOWN, REBUILDING, STOPPED, Server,
    SimError, stable_uuid)


class SimCloud:
    """A small Nova + BMC world. All parameters have demo-friendly defaults."""

    def __init__(self, hosts=6, servers_per_host=5, host_vcpus=64,
                 server_vcpus=2, report_interval=1.0, service_down_time=4.0,
                 evacuation_time=0.5, schedule_time=0.05, boot_time=2.0,
                 power_delay=0.0, api_latency=0.0, host_prefix="compute-",
                 seed=0, clock=time.time, username="admin",
                 password="secret", project="admin", region="RegionOne"):
        self.clock = clock
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
        for i in range(hosts):
            name = "%s%d" % (host_prefix, i)
            self.hosts[name] = Host(name, i, seed, host_vcpus, now)
        for name in self.hosts:
            for j in range(servers_per_host):
                sname = "%s-vm-%d" % (name, j)
                sid = stable_uuid(seed, "server", sname)
                self.servers[sid] = Server(sid, sname, name, self.project_id,
                                           self.user_id, server_vcpus, now)

    # -- time ---------------------------------------------------------------

    def _at(self, when, func, *args):
        heapq.heappush(self._events, (when, next(self._seq), func, args))

    def _advance(self):
        now = self.clock()
        while self._events and self._events[0][0] <= now:
            when, _, func, args = heapq.heappop(self._events)
            self._now = max(self._now, when)
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
        """Time of the service's last heartbeat (Nova's updated_at)."""
        if not h.alive:
            return h.frozen_heartbeat
        beats = math.floor((self._now - h.started_at) / self.report_interval)
        return h.started_at + max(beats, 0) * self.report_interval

    def service_up(self, h):
        if h.forced_down:
            return False
        return abs(self._now - self.heartbeat(h)) <= self.service_down_time

    def _used_vcpus(self, name):
        used = sum(s.vcpus for s in self.servers.values() if s.host == name)
        for m in self.migrations:
            if m.dest_compute == name and m.status == "pre-migrating":
                used += self.servers[m.instance_uuid].vcpus
        return used

    # -- compute process and power -------------------------------------------

    def _stop_process(self, h):
        if h.alive:
            h.frozen_heartbeat = self.heartbeat(h)
            h.alive = False
        h.boot_generation += 1      # cancels a boot in progress

    def kill(self, name):
        """The nova-compute process crashes; the host stays powered on."""
        with self.lock:
            self._advance()
            self._stop_process(self._host(name))

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

    def _apply_power(self, h, on, generation, keep_pending=False):
        if generation != h.power_generation:
            return
        if not keep_pending:
            h.pending_power = None
        if not on:
            h.power_on = False
            self._stop_process(h)
        elif not h.power_on:
            h.power_on = True
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

    def set_bmc(self, name, reachable=None, refuse_power_off=None):
        with self.lock:
            self._advance()
            h = self._host(name)
            if reachable is not None:
                h.bmc_reachable = bool(reachable)
            if refuse_power_off is not None:
                h.bmc_refuse_power_off = bool(refuse_power_off)

    def bmc_host_for(self, username, password):
        """The host whose BMC credentials these are, or None."""
        with self.lock:
            for h in self.hosts.values():
                if h.bmc_username == username and h.bmc_password == password:
                    return h
            return None

    # -- services ------------------------------------------------------------

    def service_by_uuid(self, service_uuid):
        with self.lock:
            self._advance()
            for h in self.hosts.values():
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

    # -- evacuation ----------------------------------------------------------

    def evacuate(self, server_id, host=None, force=False, stop=False):
        """Start an evacuation like Nova's API; returns the Migration.

        ``stop`` is Nova's target_state=stopped (microversion >= 2.95).
        """
        with self.lock:
            self._advance()
            s = self._server(server_id)
            if host is not None:
                self._host(host)
                if s.host == host:
                    raise BadRequest("The target host can't be the same one.")
            if s.vm_state not in (ACTIVE, STOPPED, ERROR):
                raise Conflict("Cannot 'evacuate' instance %s while it is in "
                               "vm_state %s" % (server_id, s.vm_state))
            if s.task_state is not None:
                raise Conflict("Cannot 'evacuate' instance %s while it is in "
                               "task_state %s" % (server_id, s.task_state))
            source = self._host(s.host)
            if self.service_up(source):
                raise BadRequest("Compute service of %s is still in use."
                                 % s.host)
            s.task_state = REBUILDING
            s.updated = self._now
            m = Migration(next(self._migration_ids),
                          stable_uuid(self.seed, "migration", s.id,
                                       str(len(self.migrations))),
                          s, host, self._now)
            self.migrations.append(m)
            self._at(self._now + self.schedule_time, self._schedule, m,
                     host if force else None, host, stop)
            return m

    def _set_migration(self, m, status):
        m.status = status
        m.updated_at = self._now

    def _pick_host(self, server, source, requested):
        candidates = []
        for h in self.hosts.values():
            if h.name == source or h.disabled or not self.service_up(h):
                continue
            if requested is not None and h.name != requested:
                continue
            used = self._used_vcpus(h.name)
            if h.vcpus - used >= server.vcpus:
                candidates.append((used, h.name))
        return min(candidates)[1] if candidates else None

    def _schedule(self, m, forced, requested, stop):
        s = self.servers[m.instance_uuid]
        dest = forced or self._pick_host(s, m.source_compute, requested)
        if dest is None:
            self._set_migration(m, "error")
            s.vm_state, s.task_state = ERROR, None
            s.fault = {"code": 500, "created": self._now,
                       "message": "No valid host was found. There are not "
                                  "enough hosts available."}
            s.updated = self._now
            return
        m.dest_compute = dest
        self._set_migration(m, "pre-migrating")
        self._at(self._now + self.evacuation_time, self._rebuilt, m, stop)

    def _rebuilt(self, m, stop):
        s = self.servers[m.instance_uuid]
        dest = self.hosts[m.dest_compute]
        if not dest.alive:
            self._set_migration(m, "failed")
            s.vm_state, s.task_state = ERROR, None
            s.fault = {"code": 500, "created": self._now,
                       "message": "Compute host %s is not running."
                                  % dest.name}
            s.updated = self._now
            return
        s.host = dest.name
        s.task_state = None
        s.fault = None
        if stop or s.vm_state == STOPPED:
            s.vm_state, s.power_state = STOPPED, POWER_SHUTDOWN
        else:
            s.vm_state, s.power_state = ACTIVE, POWER_RUNNING
        s.updated = self._now
        self._set_migration(m, "done")

    # -- reads ---------------------------------------------------------------

    def list_servers(self, host=None):
        with self.lock:
            self._advance()
            return [s for s in self.servers.values()
                    if host is None or s.host == host]

    def get_server(self, server_id):
        with self.lock:
            self._advance()
            return self._server(server_id)

    def list_migrations(self, **filters):
        """Filters: migration_type, source_compute, host, status,
        instance_uuid (``host`` matches source or destination)."""
        with self.lock:
            self._advance()
            result = []
            for m in self.migrations:
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
            hosts, services = {}, {}
            for h in self.hosts.values():
                hosts[h.name] = {
                    "power": "on" if h.power_on else "off",
                    "pending_power": h.pending_power,
                    "compute_alive": h.alive,
                    "hold_cleanup": h.hold_cleanup,
                    "bmc": {"reachable": h.bmc_reachable,
                            "refuse_power_off": h.bmc_refuse_power_off},
                    "vcpus": h.vcpus, "used_vcpus": self._used_vcpus(h.name),
                }
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
                           "updated_at": m.updated_at}
                          for m in self.migrations]
            return {"now": now, "hosts": hosts, "services": services,
                    "servers": servers, "migrations": migrations}
