"""Servers booted and deleted, compute services deleted and hosts taken
out of aggregates in the simulated cloud (a drained host's smoke test,
its decommission): a mixin of :class:`~instanceha.sim.model.SimCloud`.

The rules follow Nova (read from its source, not copied):

* **create** (``POST /servers``): the server is BUILD (vm_state building,
  task scheduling, no host). ``availability_zone`` "ZONE:HOST" forces the
  host (admin only): the scheduler returns it without its filters, so
  neither disabled nor down is checked, but Placement is still asked,
  within that host's provider: no room, or (since Train, the mandatory
  ``compute_status_filter`` pre-filter, ``disabled_prefilter`` here) a
  disabled compute whose provider carries COMPUTE_STATUS_DISABLED, is
  NoValidHost. An unknown host is NoValidHost "No such host - host: H
  node: None ". Without a forced host the scheduler picks an enabled, up
  host with room in the zone asked for (the least used). NoValidHost
  leaves the server ERROR with no host and the fault "No valid host was
  found. <reason>" (code 500). After ``schedule_time`` the build is cast
  to the chosen compute; a dead compute never takes it: the server stays
  BUILD until that compute starts (then it is built). The compute claims
  it (the server's host is set, task spawning) and after
  ``server_boot_time`` it is ACTIVE, or, where builds fail
  (``fail_boots``), ERROR with the hypervisor's fault and its host
  cleared (a forced host is never rescheduled). A compute that stops
  while spawning leaves the server BUILD; when it starts again it sets
  the server to ERROR (``_init_instance``), no fault.
* **delete** (``DELETE /servers/{id}``): accepted in any state; the server
  is gone at once (its allocation with it), its moves under way end in
  ``error``.
* **delete a compute service** (``DELETE /os-services/{id}``): 409 while a
  server's host is the host ("... hosting instances. ...") or while a
  migration from or to it is not over (any status but confirmed,
  reverted, error, failed, completed, cancelled, done: "... has
  in-progress migrations. ..."); else the host leaves every aggregate and
  its service row, compute node (os-hypervisors) and resource provider
  are gone. The machine and its BMC stay; when its nova-compute starts
  again it registers a new service (a new id, enabled).
* **remove_host** from an aggregate: 404 "Cannot remove host H in
  aggregate A" when the aggregate, the compute or the membership is
  missing; 409 when the host has servers and leaving would change its
  availability zone.
"""

import itertools

from instanceha.sim.records import (
    ACTIVE, BUILDING, BadRequest, Conflict, ERROR, NotFound, POWER_NOSTATE,
    POWER_RUNNING, RESOURCES, SCHEDULING, SPAWNING, Server, stable_uuid)

NO_VALID_HOST = "No valid host was found. "
#: migration statuses that are over: Nova's delete of a compute service
#: ignores them (db ``migration_get_in_progress_by_host_and_node``)
MIGRATION_OVER = ("confirmed", "reverted", "error", "failed", "completed",
                  "cancelled", "done")
HOSTING = ("Unable to delete compute service that is hosting instances. "
           "Migrate or delete the instances first.")
MIGRATING_THERE = ("Unable to delete compute service that has in-progress "
                   "migrations. Complete the migrations or delete the "
                   "instances first.")


class Builds:
    """Mixin of SimCloud: needs its lock, clock (_advance, _now, _at),
    records, index (_resident_count, _move, _servers_on, usage, capacity),
    control plane (_control_up), moves (_moving, _end_move, _action) and
    rpc_queues."""

    def _init_builds(self, server_boot_time, disabled_prefilter, vcpus,
                     ram_mb, disk_gb):
        self.server_boot_time = float(server_boot_time)
        #: Nova since Train: a disabled compute takes no boot, forced or
        #: not (Placement's COMPUTE_STATUS_DISABLED pre-filter); False:
        #: a Nova before Train, or a compute whose trait is not synced
        self.disabled_prefilter = bool(disabled_prefilter)
        #: flavor id -> {name, vcpus, ram, disk}: what a boot may ask for
        #: (every server made at start has flavor "1")
        self.flavors = {"1": {"name": self.flavor_name, "vcpus": vcpus,
                              "ram": ram_mb, "disk": disk_gb}}
        #: host -> the fault of every build there (fail_boots)
        self.failing_boots = {}
        #: server id -> the host the scheduler allocated it, until that
        #: compute claims it
        self._build_placed = {}
        #: (time, server id, name, forced host or None) per create request
        self.create_requests = []
        #: (time, server id) per server deleted
        self.deleted_servers = []
        #: (time, service id, host) per compute service deleted
        self.deleted_services = []
        self._boot_seq = itertools.count()

    # -- knobs ----------------------------------------------------------------

    def add_flavor(self, flavor_id, vcpus, ram_mb, disk_gb, name=None):
        with self.lock:
            self.flavors[str(flavor_id)] = {
                "name": name or "flavor-%s" % flavor_id, "vcpus": int(vcpus),
                "ram": int(ram_mb), "disk": int(disk_gb)}

    def fail_boots(self, name, fail=True, message=None):
        """Builds on host ``name`` fail (``fail``; False: they succeed
        again): the server goes ERROR with ``message`` as its fault (the
        hypervisor's error) and no host."""
        with self.lock:
            self._advance()
            self._host(name)
            if fail:
                self.failing_boots[name] = message or (
                    "Failed to start the guest on %s: the hypervisor "
                    "refused it (simulated)" % name)
            else:
                self.failing_boots.pop(name, None)

    # -- hosts as Nova's compute services -------------------------------------

    def computes(self):
        """The hosts that have a nova-compute service (os-services,
        os-hypervisors and Placement list them)."""
        return [h for h in self.hosts.values() if not h.service_deleted]

    def _compute_host(self, name):
        """Host ``name`` as a compute Nova knows; NotFound when it has no
        service."""
        h = self.hosts.get(name)
        if h is None or h.service_deleted:
            raise NotFound("Compute host %s could not be found." % name)
        return h

    def zones(self):
        return {self.zone_of(h.name) for h in self.computes()}

    # -- create ---------------------------------------------------------------

    def create_server(self, name, flavor_id, image_id, zone=None,
                      host=None, metadata=None):
        """POST /servers: ``host`` forced (the "ZONE:HOST" form), else the
        scheduler picks in ``zone``. Returns the Server (BUILD)."""
        with self.lock:
            self._advance()
            flavor = self.flavors.get(str(flavor_id))
            if flavor is None:
                raise BadRequest("Flavor %s could not be found." % flavor_id)
            if image_id not in self.images:
                raise BadRequest("Image %s could not be found." % image_id)
            if zone is not None and host is None and zone not in \
                    self.zones():
                raise BadRequest("The requested availability zone is not "
                                 "available")
            sid = stable_uuid(self.seed, "server", "boot",
                              str(next(self._boot_seq)))
            s = Server(sid, name, None, self.project_id, self.user_id,
                       flavor["vcpus"], self._now, flavor["ram"],
                       flavor["disk"], image_id)
            s.vm_state, s.task_state = BUILDING, SCHEDULING
            s.power_state = POWER_NOSTATE
            s.metadata = dict(metadata or {})
            self.servers[sid] = s
            self._resident_count = -1   # the index is built again
            self.create_requests.append((self._now, sid, name, host))
            action = self._action(s, "create")
            self._at(self._now + self.schedule_time, self._build_schedule,
                     sid, host, zone, action)
            return s

    def _fits(self, h, s, claims=None):
        usable = self.capacity(h)
        used = self.usage(h.name, claims)
        need = s.resources()
        return all(usable[rc] - used[rc] >= need[rc] for rc in RESOURCES)

    def _boot_pick(self, s, zone):
        claims = self._claims()
        candidates = [
            (self.usage(h.name, claims)["VCPU"], h.name)
            for h in self.computes()
            if not h.disabled and self.service_up(h)
            and (zone is None or self.zone_of(h.name) == zone)
            and self._fits(h, s, claims)]
        return min(candidates)[1] if candidates else None

    def _build_fail(self, s, message):
        if s.host is not None:
            self._move(s, None)
        s.vm_state, s.task_state = ERROR, None
        s.power_state = POWER_NOSTATE
        s.fault = {"code": 500, "created": self._now, "message": message}
        s.updated = self._now

    def _build_schedule(self, sid, forced, zone, action):
        s = self.servers.get(sid)
        if s is None or s.vm_state != BUILDING:
            return                      # deleted meanwhile
        if not self._control_up("nova-conductor"):
            # The API's cast waits in the conductor's queue.
            self._at(self._now + self.report_interval, self._build_schedule,
                     sid, forced, zone, action)
            return
        ev = self._event(action, "conductor_schedule_and_build_instances",
                         "conductor", self._now)
        reason, dest = None, None
        if not self._control_up("nova-scheduler"):
            # select_destinations times out: the conductor buries the
            # instance in cell0 with the error.
            self._end_event(ev, False)
            self._build_fail(s, "Timed out waiting for a reply to "
                                "select_destinations")
            return
        if not self.placement_reachable:
            reason = ""                 # no allocation candidates
        elif forced is not None:
            h = self.hosts.get(forced)
            if h is None or h.service_deleted:
                reason = "No such host - host: %s node: None " % forced
            elif (self.disabled_prefilter and h.disabled) \
                    or not self._fits(h, s):
                reason = ""
            else:
                dest = forced
        else:
            dest = self._boot_pick(s, zone)
            if dest is None:
                reason = ""
        if dest is None:
            self._end_event(ev, False)
            self._build_fail(s, NO_VALID_HOST + reason)
            return
        self._end_event(ev, True)
        self._build_placed[sid] = dest  # Placement: the scheduler's claim
        if self.hosts[dest].alive:
            self._build_claim(sid, dest, action)
        else:
            self.rpc_queues.setdefault(dest, []).append(
                (self._build_claim, (sid, dest, action)))

    def _build_claim(self, sid, dest, action):
        # The compute takes the build: its claim sets the server's host.
        s = self.servers.get(sid)
        if s is None or s.vm_state != BUILDING:
            self._build_placed.pop(sid, None)
            return
        h = self.hosts[dest]
        ev = self._event(action, "compute__do_build_and_run_instance", dest,
                         self._now)
        self._move(s, dest)
        self._build_placed.pop(sid, None)
        s.task_state = SPAWNING
        s.updated = self._now
        self._at(self._now + self.server_boot_time, self._build_done, sid,
                 dest, ev, h.boot_generation)

    def _build_done(self, sid, dest, ev, generation):
        s = self.servers.get(sid)
        h = self.hosts[dest]
        if s is None or s.vm_state != BUILDING or s.host != dest:
            return
        if not h.alive or h.boot_generation != generation:
            return          # its compute stopped: BUILD until it starts
        fault = self.failing_boots.get(dest)
        if fault is not None:
            # Not rescheduled (a forced host has no retries): ERROR, the
            # host cleared, the allocation gone.
            self._end_event(ev, False)
            self._build_fail(s, fault)
            return
        s.vm_state, s.task_state = ACTIVE, None
        s.power_state = POWER_RUNNING
        s.updated = self._now
        self._end_event(ev, True)

    def builds_host_started(self, h):
        """The compute of host ``h`` started: a deleted service registers
        anew; a server it was spawning when it stopped is set to ERROR
        (no fault)."""
        if h.service_deleted:
            h.service_deleted = False
            h.registrations += 1
            h.service_uuid = stable_uuid(self.seed, "service", h.name,
                                         str(h.registrations))
            h.disabled, h.disabled_reason = False, None
            h.forced_down = False
            h.service_updated = self._now
        for s in self._servers_on(h.name):
            if s.vm_state == BUILDING:
                s.vm_state, s.task_state = ERROR, None
                s.updated = self._now

    def build_claims(self, out):
        """Add to ``out`` (host -> [servers], SimCloud._claims) the
        scheduler's allocations of builds no compute has claimed yet."""
        for sid, where in self._build_placed.items():
            s = self.servers.get(sid)
            if s is not None and s.host != where:
                out.setdefault(where, []).append(s)
        return out

    # -- delete ---------------------------------------------------------------

    def delete_server(self, server_id):
        """DELETE /servers/{id}: gone at once (NotFound when it is not
        there)."""
        with self.lock:
            self._advance()
            s = self._server(server_id)
            for m in list(self._moving.values()):
                if m.instance_uuid == s.id:
                    self._end_move(m, "error")
            del self.servers[s.id]
            self._resident_count = -1   # the index is built again
            self._build_placed.pop(s.id, None)
            self.rebuilding.pop(s.id, None)
            self.stalled_servers.discard(s.id)
            self.deleted_servers.append((self._now, s.id))

    def delete_service(self, service_id):
        """DELETE /os-services/{id} of a nova-compute (its UUID, or its
        integer id below microversion 2.53)."""
        with self.lock:
            self._advance()
            h = next((h for h in self.computes()
                      if service_id in (h.service_uuid,
                                        str(h.service_id))), None)
            if h is None:
                raise NotFound("Service %s not found." % service_id)
            if self._servers_on(h.name):
                raise Conflict(HOSTING)
            if any(h.name in (m.source_compute, m.dest_compute)
                   and m.status not in MIGRATION_OVER
                   for m in self.migrations):
                raise Conflict(MIGRATING_THERE)
            for agg in self.aggregates.values():
                if h.name in agg["hosts"]:
                    agg["hosts"].remove(h.name)
                    agg["updated"] = self._now
            h.service_deleted = True
            h.service_updated = self._now
            self.deleted_services.append((self._now, h.service_uuid,
                                          h.name))

    def remove_host_from_aggregate(self, aggregate_id, host):
        """os-aggregates remove_host; returns the aggregate as
        list_aggregates shows it."""
        with self.lock:
            self._advance()
            missing = NotFound("Cannot remove host %s in aggregate %s"
                               % (host, aggregate_id))
            try:
                name, agg = self._aggregate_by_id(aggregate_id)
            except NotFound:
                raise missing from None
            h = self.hosts.get(host)
            if h is None or h.service_deleted or host not in agg["hosts"]:
                raise missing
            current = agg["availability_zone"]
            residents = self._servers_on(host)
            if residents and current:
                after = next((a["availability_zone"]
                              for a in self.aggregates.values()
                              if a is not agg and host in a["hosts"]
                              and a["availability_zone"]), None)
                if after != current:
                    raise Conflict(
                        "Cannot remove host from aggregate %s. Reason: The "
                        "host cannot be removed from the aggregate as the "
                        "availability zone of the host would change from "
                        "'%s' to '%s' but the host already has %d "
                        "instance(s)." % (agg["id"], current, after,
                                          len(residents)))
            agg["hosts"].remove(host)
            agg["updated"] = self._now
            return dict(agg, name=name, hosts=list(agg["hosts"]))
