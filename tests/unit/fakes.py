"""In-memory drivers behind the real interfaces, for engine unit tests."""

from instanceha.drivers.compute import base as cb
from instanceha.drivers.fencing import base as fb


class Clock:
    def __init__(self, now=1_000_000.0):
        self.now = now

    def __call__(self):
        return self.now

    def advance(self, seconds):
        self.now += seconds


class FakeCompute(cb.ComputeDriver):
    """Nova's rules that matter to the engine, evacuations finishing at once."""

    def __init__(self, clock, hosts=3, servers_per_host=2, capacity=100):
        self.clock = clock
        self.services = {}
        self.servers = {}
        self.migrations = []
        self.capacity = capacity
        self.fail = {}               # method name -> [exceptions to raise]
        self.complete = True         # False: migrations stay 'accepted'
        self.on_evacuate = None      # hook(server_id, dest) after a request
        #: [stage, count]: the next ``count`` destinations die at
        #: "cast" (never take the rebuild) or "claim" (during it)
        self.doomed = []
        self.events = {}             # server_id -> latest request's events
        self.resets = []             # (server_id, state) per os-resetState
        self.aggregates = []         # [cb.Aggregate]
        self.images = {}             # image id -> Glance body
        self.report_capacity = False  # host_capacities answers
        self.requested = {}          # server id -> host asked for (or None)
        #: live and cold migrations (dicts, oldest first; see live_migrate)
        self.moves = []
        self.move_calls = []         # (method, server id[, migration id])
        #: False: live migrations stay 'running' (memory_remaining stuck)
        #: until aborted, forced to complete or finish_moves(); cold ones
        #: stay 'migrating' until finish_moves()
        self.moves_complete = True
        self.stalled = set()         # server ids whose moves stay running
        #: issue 24's put-back and decommission (see create_server)
        self.fail_boots_on = set()   # hosts where a build fails
        self.disabled_prefilter = False  # True: Nova since Train
        self.boots = []              # create_server's arguments, in order
        self.deleted = []            # server ids delete_server removed
        self.aggregate_calls = []    # ("remove_host", aggregate id, host)
        for i in range(hosts):
            name = "compute-%d" % i
            self.services[name] = dict(id="uuid-%d" % i, host=name,
                                       status="enabled", forced_down=False,
                                       disabled_reason=None,
                                       updated_at=clock(), alive=True)
            for j in range(servers_per_host):
                sid = "%s-vm-%d" % (name, j)
                self.servers[sid] = dict(id=sid, host=name, status="ACTIVE",
                                         vm_state="active", fault=None)

    def _maybe_fail(self):
        import sys
        pending = self.fail.get(sys._getframe(1).f_code.co_name)
        if pending:
            raise pending.pop(0)

    def heartbeat(self):
        for s in self.services.values():
            if s["alive"]:
                s["updated_at"] = self.clock()

    def by_id(self, service_id):
        return next(s for s in self.services.values() if s["id"] == service_id)

    def list_services(self):
        self._maybe_fail()
        out = []
        for s in self.services.values():
            up = (not s["forced_down"]
                  and self.clock() - s["updated_at"] <= 8)
            out.append(cb.ComputeService(
                id=s["id"], host=s["host"], state="up" if up else "down",
                status=s["status"], forced_down=s["forced_down"],
                disabled_reason=s["disabled_reason"],
                updated_at=s["updated_at"]))
        return out

    def force_down(self, service_id, reason):
        self._maybe_fail()
        s = self.by_id(service_id)
        self.clock.advance(0.5)       # the request takes time
        # Like Nova, any write bumps updated_at.
        s.update(forced_down=True, status="disabled", disabled_reason=reason,
                 updated_at=self.clock())
        return next(x for x in self.list_services() if x.id == service_id)

    def restore(self, service_id, enable, disabled_reason=None):
        self._maybe_fail()
        s = self.by_id(service_id)
        if any(m["source"] == s["host"] and m["status"] != "completed"
               for m in self.migrations):
            raise cb.Conflict("evacuations not cleaned up", 400)
        s["forced_down"] = False
        if enable:
            s.update(status="enabled", disabled_reason=None)
        elif disabled_reason is not None:
            s.update(status="disabled", disabled_reason=disabled_reason)

    def list_servers(self, host):
        self._maybe_fail()
        return [self.get_server(sid) for sid, v in self.servers.items()
                if v["host"] == host]

    def list_all_servers(self, per_page=None):
        """In pages of 2 servers, as Nova's of [api] max_limit."""
        self._maybe_fail()
        servers = [self.get_server(sid) for sid in self.servers]
        if per_page is None:
            return servers
        out = []
        for i in range(0, len(servers), 2):
            out.extend(per_page(servers[i:i + 2]))
        return out

    def get_server(self, server_id):
        """``project``: the server's project (Nova's tenant_id), if set."""
        v = self.servers[server_id]
        raw = {"metadata": dict(v.get("metadata") or {}),
               "tags": list(v.get("tags") or ()),
               "created": v.get("created"),
               "flavor": {"vcpus": 1, "ram": 1024, "disk": 10,
                          "ephemeral": 0, "swap": 0, "extra_specs": {}},
               "image": {"id": v["image"]} if v.get("image") else ""}
        if v.get("project"):
            raw["tenant_id"] = v["project"]
        return cb.Server(id=v["id"], name=v.get("name") or v["id"],
                         status=v["status"],
                         host=v["host"], vm_state=v["vm_state"],
                         fault=v["fault"], task_state=v.get("task_state"),
                         power_state=v.get("power_state"), raw=raw)

    def find_servers(self, name):
        self._maybe_fail()
        return [self.get_server(sid) for sid, v in self.servers.items()
                if (v.get("name") or v["id"]) == name]

    # -- instance repair (issue 25) -------------------------------------------
    def list_servers_by_status(self, status):
        self._maybe_fail()
        return [self.get_server(sid) for sid, v in self.servers.items()
                if v["status"] == status]

    def instance_actions(self, server_id):
        self._maybe_fail()
        v = self._server_or_404(server_id)
        return [cb.InstanceAction(**a) for a in reversed(
            v.get("actions") or [])]

    def _repair_call(self, name, server_id, accepted):
        self._maybe_fail()
        self.repair_calls = getattr(self, "repair_calls", [])
        self.repair_calls.append((name, server_id))
        v = self._server_or_404(server_id)
        if v["vm_state"] not in accepted or v.get("task_state"):
            raise cb.Conflict("Cannot '%s' instance %s while it is in "
                              "vm_state %s" % (name, server_id,
                                               v["vm_state"]), 409)
        # Nova's API records the action once it accepts the request.
        self._record_action(v, name)
        fails = (v.get("repair_faults") or {}).get(name)
        if fails:
            v.update(vm_state="error", status="ERROR", power_state=4)
        else:
            v.update(vm_state="active", status="ACTIVE", power_state=1)

    def _record_action(self, v, name):
        v.setdefault("actions", []).append(dict(
            action=name, user_id="instanceha", project_id=v.get("project"),
            request_id="req-%s-%d" % (name, len(v["actions"])),
            start_time=self.clock()))

    def start_server(self, server_id):
        """ACTIVE at once (ERROR when the server's ``repair_faults`` names
        the action)."""
        self._repair_call("start", server_id, ("stopped",))

    def reboot_server(self, server_id, hard=True):
        self._repair_call("reboot", server_id, (
            "active", "stopped", "paused", "suspended", "error"))

    def rebuild_server(self, server_id, image_id):
        self._repair_call("rebuild", server_id, ("active", "stopped",
                                                 "error"))

    def set_server_metadata(self, server_id, items):
        self._maybe_fail()
        v = self._server_or_404(server_id)
        meta = v.setdefault("metadata", {})
        for key, value in items.items():
            if value is None:
                meta.pop(key, None)
            else:
                meta[key] = str(value)

    def list_aggregates(self):
        self._maybe_fail()
        return list(self.aggregates)

    def get_aggregate(self, aggregate_id):
        self._maybe_fail()
        for a in self.aggregates:
            if a.id == aggregate_id:
                return a
        raise cb.NotFound("aggregate %s" % aggregate_id, 404)

    def unset_aggregate_metadata(self, aggregate_id, key):
        self._maybe_fail()
        import dataclasses
        a = self.get_aggregate(aggregate_id)
        meta = {k: v for k, v in a.metadata.items() if k != key}
        self.aggregates[self.aggregates.index(a)] = dataclasses.replace(
            a, metadata=meta)

    def delete_server_metadata(self, server_id, key):
        self._maybe_fail()
        meta = self.servers[server_id].get("metadata") or {}
        if key not in meta:
            raise cb.NotFound("metadata key %s" % key, 404)
        del meta[key]

    def enable_service(self, service_id):
        self._maybe_fail()
        self.by_id(service_id).update(status="enabled", disabled_reason=None)

    def disable_service(self, service_id, reason):
        self._maybe_fail()
        self.by_id(service_id).update(status="disabled",
                                      disabled_reason=reason)

    def host_capacities(self):
        """Placement's view: each server takes 1 vCPU, 1024 MB, 10 GB;
        a host holds ``capacity`` of them. Only with ``report_capacity``
        (else like a driver that cannot read Placement)."""
        self._maybe_fail()
        if not self.report_capacity:
            raise NotImplementedError
        out = {}
        for name in self.services:
            used = sum(1 for v in self.servers.values() if v["host"] == name)
            out[name] = cb.HostCapacity(
                name, self.capacity, used, self.capacity * 1024, used * 1024,
                self.capacity * 10, used * 10)
        return out

    def get_image(self, image_id):
        self._maybe_fail()
        try:
            return dict(self.images[image_id], id=image_id)
        except KeyError:
            raise cb.NotFound("image %s" % image_id, 404)

    def _targets(self, source):
        return [s for s in self.services.values()
                if s["host"] != source and s["status"] == "enabled"
                and not s["forced_down"] and s["alive"]]

    def evacuate(self, server_id, microversion=None, host=None):
        """Like Nova: a stopped server arrives stopped, one in error
        arrives ACTIVE, and from microversion 2.95 every other server
        arrives stopped too (``microversion``: (major, minor), None as
        2.94)."""
        self._maybe_fail()
        v = self.servers[server_id]
        stop_all = tuple(microversion or (2, 94)) >= (2, 95)
        src = self.services[v["host"]]
        if not src["forced_down"]:
            raise cb.Conflict("Compute service of %s is still in use."
                              % v["host"], 400)
        targets = [t for t in self._targets(v["host"])
                   if sum(1 for x in self.servers.values()
                          if x["host"] == t["host"]) < self.capacity]
        if host is not None:
            # A requested host: the scheduler validates it like any other.
            if host not in self.services:
                raise cb.NotFound("Compute host %s not found." % host, 404)
            targets = [t for t in targets if t["host"] == host]
        self.requested[server_id] = host
        mig = dict(id="m%d" % len(self.migrations), server=server_id,
                   source=v["host"], dest=None, status="accepted",
                   created_at=self.clock() + len(self.migrations) * 1e-6)
        self.migrations.append(mig)
        # Like Nova's conductor: the oldest accepted migration is used.
        mig = next(m for m in self.migrations
                   if m["server"] == server_id and m["status"] == "accepted")
        conductor = cb.ActionEvent("rebuild_server", "conductor",
                                   True, "Success" if targets else "Error")
        self.events[server_id] = [conductor]
        doom = next((d for d in self.doomed if d[1] > 0), None)
        if targets and doom is not None:
            doom[1] -= 1
            dest = min(targets, key=lambda t: t["host"])
            self.kill(dest["host"])
            v.update(task_state="rebuilding", status="REBUILD")
            if doom[0] == "claim":
                mig.update(status="pre-migrating", dest=dest["host"])
                self.events[server_id].append(cb.ActionEvent(
                    "compute_rebuild_instance", dest["host"], False))
            return
        if not targets:
            mig["status"] = "error"
            v.update(status="ERROR", vm_state="error",
                     fault="No valid host was found. ")
            return
        dest = min(targets, key=lambda t: sum(
            1 for x in self.servers.values() if x["host"] == t["host"]))
        if not self.complete:
            mig.update(status="accepted", dest=dest["host"])
            v["task_state"] = "rebuilding"
        else:
            mig.update(status="done", dest=dest["host"])
            stopped = v["vm_state"] == "stopped" or (
                stop_all and v["vm_state"] != "error")
            v.update(host=dest["host"], status="SHUTOFF" if stopped
                     else "ACTIVE", vm_state="stopped" if stopped
                     else "active", fault=None, task_state=None)
            self.events[server_id].append(cb.ActionEvent(
                "compute_rebuild_instance", dest["host"], True, "Success"))
        if self.on_evacuate:
            self.on_evacuate(server_id, dest["host"])

    def rebuild_events(self, server_id):
        self._maybe_fail()
        return list(self.events.get(server_id, []))

    def reset_state(self, server_id, state="active"):
        self._maybe_fail()
        v = self.servers[server_id]
        v.update(vm_state=state, task_state=None,
                 status="ACTIVE" if state == "active" else "ERROR")
        self.resets.append((server_id, state))

    def list_evacuations(self, host):
        self._maybe_fail()
        return [cb.Migration(id=m["id"], server_id=m["server"],
                             source_host=m["source"], dest_host=m["dest"],
                             status=m["status"], migration_type="evacuation",
                             created_at=m["created_at"])
                for m in self.migrations if m["source"] == host]

    # -- live and cold migrations (planned drain) ---------------------------
    #
    # Kept apart from ``migrations`` (evacuations), so that restore() and
    # list_evacuations() see only evacuations. Each move is a dict: id,
    # server, source, dest, type ("live-migration" | "migration"), status,
    # created_at, updated_at, memory_total, memory_remaining, and for a cold
    # migration the vm_state to come back to.

    MEMORY = 1024 * 1024 * 1024         # bytes a live migration copies

    def _server_or_404(self, server_id):
        try:
            return self.servers[server_id]
        except KeyError:
            raise cb.NotFound("Instance %s could not be found." % server_id,
                              404)

    def _service_up(self, host):
        s = self.services.get(host)
        return (s is not None and s["alive"] and not s["forced_down"]
                and self.clock() - s["updated_at"] <= 8)

    def _move_target(self, source):
        targets = [t for t in self._targets(source)
                   if sum(1 for x in self.servers.values()
                          if x["host"] == t["host"]) < self.capacity]
        if not targets:
            return None
        return min(targets, key=lambda t: (sum(
            1 for x in self.servers.values() if x["host"] == t["host"]),
            t["host"]))["host"]

    def _new_move(self, server_id, kind, status, dest):
        moves = self.moves
        v = self.servers[server_id]
        now = self.clock()
        m = dict(id=str(len(moves) + 1), server=server_id, source=v["host"],
                 dest=dest, type=kind, status=status,
                 created_at=now + len(moves) * 1e-6, updated_at=now,
                 memory_total=self.MEMORY if kind == "live-migration"
                 else None,
                 memory_remaining=self.MEMORY if kind == "live-migration"
                 else None, vm_state=v["vm_state"])
        moves.append(m)
        return m

    def _set_move(self, m, status):
        m.update(status=status, updated_at=self.clock())

    def _finish_live(self, m):
        v = self.servers[m["server"]]
        self._set_move(m, "completed")
        m["memory_remaining"] = 0
        v.update(host=m["dest"], task_state=None,
                 status="PAUSED" if v["vm_state"] == "paused" else "ACTIVE")

    def _finish_cold(self, m):
        v = self.servers[m["server"]]
        self._set_move(m, "finished")
        v.update(host=m["dest"], task_state=None, vm_state="resized",
                 status="VERIFY_RESIZE")

    def live_migrate(self, server_id, block_migration="auto", host=None):
        """Like Nova at microversion 2.30 (pre-checks within the request):
        409 unless ACTIVE or PAUSED with no task; 400 when the source
        compute is down or no host fits (the record goes 'error'). Then
        'completed' at once, or 'running' (task_state migrating) while
        ``moves_complete`` is False or the server is in ``stalled``.
        ``host``: checked like any other (400 when unknown, the source,
        disabled, down or full); the call is recorded with it."""
        self._maybe_fail()
        self.move_calls.append(("live_migrate", server_id) if host is None
                               else ("live_migrate", server_id, host))
        v = self._server_or_404(server_id)
        if v["vm_state"] not in ("active", "paused") \
                or v.get("task_state") is not None:
            raise cb.Conflict("Cannot 'os-migrateLive' instance %s while it "
                              "is in vm_state %s" % (server_id,
                                                     v["vm_state"]), 409)
        if host is not None and host not in self.services:
            raise cb.ComputeError("Compute host %s could not be found."
                                  % host, 400)
        if host is not None and host == v["host"]:
            raise cb.ComputeError("Unable to migrate instance (%s) to "
                                  "current host (%s)." % (server_id, host),
                                  400)
        if not self._service_up(v["host"]):
            raise cb.ComputeError("Compute service of %s is unavailable at "
                                  "this time." % v["host"], 400)
        dest = self._move_target(v["host"])
        if host is not None:
            dest = host if self._fits(host) else None
        if dest is None:
            self._new_move(server_id, "live-migration", "error", None)
            raise cb.ComputeError("No valid host was found. There are not "
                                  "enough hosts available.", 400)
        m = self._new_move(server_id, "live-migration", "running", dest)
        v.update(task_state="migrating", status="MIGRATING")
        if self.moves_complete and server_id not in self.stalled:
            self._finish_live(m)
        else:
            m["memory_remaining"] = self.MEMORY // 2

    def cold_migrate(self, server_id):
        """409 unless ACTIVE or SHUTOFF with no task and its compute up.
        No host: the record goes 'error', the server stays as it was (Nova
        answers 202 and fails later). Else VERIFY_RESIZE on the
        destination at once (or 'migrating', task resize_migrating, while
        ``moves_complete`` is False)."""
        self._maybe_fail()
        self.move_calls.append(("cold_migrate", server_id))
        v = self._server_or_404(server_id)
        if v["vm_state"] not in ("active", "stopped") \
                or v.get("task_state") is not None:
            raise cb.Conflict("Cannot 'migrate' instance %s while it is in "
                              "vm_state %s" % (server_id, v["vm_state"]), 409)
        if not self._service_up(v["host"]):
            raise cb.Conflict("Service is unavailable at this time.", 409)
        self._record_action(v, "migrate")
        dest = self._move_target(v["host"])
        if dest is None:
            self._new_move(server_id, "migration", "error", None)
            return
        m = self._new_move(server_id, "migration", "migrating", dest)
        if self.moves_complete and server_id not in self.stalled:
            self._finish_cold(m)
        else:
            v.update(task_state="resize_migrating", status="RESIZE")

    def confirm_resize(self, server_id):
        self._maybe_fail()
        self.move_calls.append(("confirm_resize", server_id))
        v = self._server_or_404(server_id)
        if v["vm_state"] != "resized":
            raise cb.Conflict("Cannot 'confirmResize' instance %s while it "
                              "is in vm_state %s" % (server_id,
                                                     v["vm_state"]), 409)
        m = next((m for m in self.moves if m["server"] == server_id
                  and m["status"] == "finished"), None)
        if m is None:
            raise cb.ComputeError("Instance has not been resized.", 400)
        self._set_move(m, "confirmed")
        stopped = m["vm_state"] == "stopped"
        v.update(vm_state=m["vm_state"],
                 status="SHUTOFF" if stopped else "ACTIVE")

    def server_migrations(self, server_id):
        self._maybe_fail()
        self._server_or_404(server_id)
        return [cb.ServerMigration(
            id=m["id"], server_id=server_id, status=m["status"],
            source_host=m["source"], dest_host=m["dest"],
            memory_total=m["memory_total"],
            memory_remaining=m["memory_remaining"], disk_total=0,
            disk_remaining=0, updated_at=m["updated_at"],
            uuid="uuid-move-%s" % m["id"])
            for m in self.moves if m["server"] == server_id
            and m["type"] == "live-migration"
            and m["status"] in ("queued", "preparing", "running",
                                "post-migrating")]

    def _live_move(self, server_id, migration_id):
        m = next((m for m in self.moves if m["id"] == str(migration_id)
                  and m["server"] == server_id), None)
        if m is None:
            raise cb.NotFound("Migration %s for instance %s could not be "
                              "found." % (migration_id, server_id), 404)
        return m

    def abort_migration(self, server_id, migration_id):
        """Nova's rules at 2.65: the server's task must be migrating (409),
        the migration queued, preparing or running (else 400). It goes
        'cancelled' and the server stays where it was, ACTIVE."""
        self._maybe_fail()
        self.move_calls.append(("abort_migration", server_id,
                                str(migration_id)))
        v = self._server_or_404(server_id)
        if v.get("task_state") != "migrating":
            raise cb.Conflict("Cannot 'abort live migration' instance %s "
                              "while it is in task_state %s"
                              % (server_id, v.get("task_state")), 409)
        m = self._live_move(server_id, migration_id)
        if m["status"] not in ("queued", "preparing", "running"):
            raise cb.ComputeError(
                "Migration %s state of instance %s is %s. Cannot abort live "
                "migration while the migration is in this state."
                % (migration_id, server_id, m["status"]), 400)
        self._set_move(m, "cancelled")
        v.update(task_state=None,
                 status="PAUSED" if v["vm_state"] == "paused" else "ACTIVE")

    def force_complete_migration(self, server_id, migration_id):
        """Nova's rules: ACTIVE with task migrating (409), the migration
        'running' (else 400); then it completes at once."""
        self._maybe_fail()
        self.move_calls.append(("force_complete_migration", server_id,
                                str(migration_id)))
        v = self._server_or_404(server_id)
        if v["vm_state"] != "active" or v.get("task_state") != "migrating":
            raise cb.Conflict("Cannot 'force_complete' instance %s while it "
                              "is in task_state %s"
                              % (server_id, v.get("task_state")), 409)
        m = self._live_move(server_id, migration_id)
        if m["status"] != "running":
            raise cb.ComputeError(
                "Migration %s state of instance %s is %s. Cannot force "
                "complete while the migration is in this state."
                % (migration_id, server_id, m["status"]), 400)
        self._finish_live(m)

    def list_host_migrations(self, host, since=None):
        self._maybe_fail()
        moves = [m for m in self.moves
                 if host in (m["source"], m["dest"])
                 and (since is None or m["updated_at"] >= since)]
        return [cb.Migration(id=m["id"], server_id=m["server"],
                             source_host=m["source"], dest_host=m["dest"],
                             status=m["status"], migration_type=m["type"],
                             created_at=m["created_at"],
                             updated_at=m["updated_at"])
                for m in sorted(moves, key=lambda m: m["created_at"],
                                reverse=True)]

    def finish_moves(self, server_id=None):
        """The world: every live migration still running, and every cold
        one still migrating (of ``server_id`` only, when given),
        completes now (a stall ending)."""
        for m in self.moves:
            if server_id is not None and m["server"] != server_id:
                continue
            if m["type"] == "live-migration" and m["status"] in (
                    "queued", "preparing", "running"):
                self._finish_live(m)
            elif m["type"] == "migration" and m["status"] == "migrating":
                self._finish_cold(m)

    def _host_lost_mid_move(self, host):
        """A host dying fails the moves still under way from or to it:
        'error', the server stays on its source (so that the failure path
        evacuates it from there)."""
        for m in self.moves:
            if host not in (m["source"], m["dest"]):
                continue
            v = self.servers[m["server"]]
            if m["type"] == "live-migration" and m["status"] in (
                    "queued", "preparing", "running", "post-migrating"):
                self._set_move(m, "error")
                v.update(task_state=None, status="PAUSED"
                         if v["vm_state"] == "paused" else "ACTIVE")
            elif m["type"] == "migration" and m["status"] == "migrating":
                self._set_move(m, "error")
                v.update(task_state=None, status="SHUTOFF"
                         if v["vm_state"] == "stopped" else "ACTIVE")

    # -- putting a host back, or retiring it (issue 24) -----------------------
    #
    # A smoke test's server (create_server) is ACTIVE at once on the host
    # it was forced onto, or ERROR with Nova's fault and no host: when the
    # host's compute is dead or forced down (the fake's simplification:
    # Nova would leave it in BUILD until that compute starts), full, in
    # ``fail_boots_on`` (the build fails there), or disabled while
    # ``disabled_prefilter`` is True (Nova since Train: Placement's
    # COMPUTE_STATUS_DISABLED trait is forbidden even for a forced host).

    def _fits(self, host):
        """Whether ``host`` would take one more server: enabled, up, with
        room (the scheduler's checks of a requested host)."""
        s = self.services.get(host)
        return (s is not None and s["status"] == "enabled"
                and self._service_up(host)
                and sum(1 for x in self.servers.values()
                        if x["host"] == host) < self.capacity)

    def create_server(self, name, flavor_id, image_id, host, zone=None,
                      network=None):
        self._maybe_fail()
        self.boots.append(dict(name=name, flavor_id=flavor_id,
                               image_id=image_id, host=host,
                               zone=zone or "nova", network=network))
        sid = "%s-%d" % (name, len(self.boots) - 1)
        s = self.services.get(host)
        fault = None
        if s is None:
            fault = ("No valid host was found. No such host - host: %s "
                     "node: None " % host)
        elif not self._service_up(host):
            fault = "No valid host was found. "
        elif self.disabled_prefilter and s["status"] != "enabled":
            fault = "No valid host was found. "
        elif sum(1 for x in self.servers.values()
                 if x["host"] == host) >= self.capacity:
            fault = "No valid host was found. "
        elif host in self.fail_boots_on:
            fault = ("Build of instance %s aborted: the hypervisor of %s "
                     "failed to start it" % (sid, host))
        self.servers[sid] = dict(
            id=sid, name=name, host=None if fault else host,
            task_state=None, status="ERROR" if fault else "ACTIVE",
            vm_state="error" if fault else "active", fault=fault,
            image=image_id)
        return self.get_server(sid)

    def delete_server(self, server_id):
        """Gone at once; a server already gone is no error."""
        self._maybe_fail()
        if self.servers.pop(server_id, None) is not None:
            self.deleted.append(server_id)

    def delete_service(self, service_id):
        """Nova's refusals (409): servers on the host, or a live or cold
        migration not over from or to it. Else the service is gone, and
        the host out of every aggregate (Nova does both)."""
        self._maybe_fail()
        host = next((h for h, s in self.services.items()
                     if s["id"] == service_id), None)
        if host is None:
            raise cb.NotFound("Service %s not found." % service_id, 404)
        if any(v["host"] == host for v in self.servers.values()):
            raise cb.Conflict("Unable to delete compute service that is "
                              "hosting instances. Migrate or delete the "
                              "instances first.", 409)
        if any(host in (m["source"], m["dest"]) and m["status"] not in (
                "confirmed", "error", "failed", "completed", "cancelled")
               for m in self.moves):
            raise cb.Conflict("Unable to delete compute service that has "
                              "in-progress migrations. Complete the "
                              "migrations or delete the instances first.",
                              409)
        del self.services[host]
        for a in list(self.aggregates):
            if host in a.hosts:
                self._drop_from_aggregate(a, host)

    def _drop_from_aggregate(self, a, host):
        import dataclasses
        self.aggregates[self.aggregates.index(a)] = dataclasses.replace(
            a, hosts=tuple(h for h in a.hosts if h != host))

    def remove_host_from_aggregate(self, aggregate_id, host):
        """404 (Nova's one message) when the aggregate is unknown or the
        host is not in it."""
        self._maybe_fail()
        self.aggregate_calls.append(("remove_host", aggregate_id, host))
        a = next((a for a in self.aggregates if a.id == aggregate_id),
                 None)
        if a is None or host not in a.hosts:
            raise cb.NotFound("Cannot remove host %s in aggregate %s"
                              % (host, aggregate_id), 404)
        self._drop_from_aggregate(a, host)

    # the world
    def kill(self, host):
        self.services[host]["alive"] = False
        self._host_lost_mid_move(host)

    def boot(self, host):
        s = self.services[host]
        s.update(alive=True, updated_at=self.clock())
        for m in self.migrations:
            if m["source"] == host and m["status"] == "done":
                m["status"] = "completed"

    # the control plane (ControlPlaneMonitor): binary -> {host: None while
    # it heartbeats, else its last heartbeat}; a binary absent is unlisted
    control = None
    placement_error = None       # raised by every check_placement

    def _control(self):
        if self.control is None:
            self.control = {"nova-scheduler": {"controller-0": None},
                            "nova-conductor": {"controller-0": None}}
        return self.control

    def list_control_services(self):
        self._maybe_fail()
        now = self.clock()
        out = []
        for binary, hosts in sorted(self._control().items()):
            for host, last in sorted(hosts.items()):
                at = now if last is None else last
                out.append(cb.ComputeService(
                    id="%s-%s" % (binary, host), host=host,
                    state="up" if now - at <= 8 else "down",
                    status="enabled", forced_down=False,
                    disabled_reason=None, updated_at=at, zone="internal",
                    binary=binary))
        return out

    def check_placement(self):
        self._maybe_fail()
        if self.placement_error is not None:
            raise self.placement_error

    def kill_control(self, binary, host="controller-0"):
        self._control()[binary][host] = self.clock()

    def start_control(self, binary, host="controller-0"):
        self._control()[binary][host] = None


class FakeFencer(fb.FencingDriver):
    name = "fake"

    def __init__(self, compute, refuse=()):
        self.compute = compute
        self.refuse = set(refuse)
        self.powered_off = []

    def power_off(self, bmc):
        if bmc.host in self.refuse:
            raise fb.FenceError("%s: BMC refused power off" % bmc.host)
        self.powered_off.append(bmc.host)
        self.compute.kill(bmc.host)

    def power_state(self, bmc):
        return (fb.PowerState.OFF if bmc.host in self.powered_off
                else fb.PowerState.ON)


def evacuate_to_end(ctx, record, step=None, passes=100000):
    """An evacuation's passes one after the other, as the engine runs
    them: between two passes the board's wait lets the delay the pass
    asked for go by (on the test's clock). ``step``: the pass function
    (evacuator.evacuate_pass, or evacuator.evacuate for the result event)."""
    from instanceha.engine import evacuator
    step = step or evacuator.evacuate_pass
    carry = None
    for _ in range(passes):
        out = step(ctx, record, carry)
        if not isinstance(out, evacuator.Requeue):
            return out
        carry = out.carry
        ctx.board.wait(ctx.board.generation(), out.after)
    raise AssertionError("the evacuation did not finish in %d passes"
                         % passes)
