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

    def get_server(self, server_id):
        v = self.servers[server_id]
        return cb.Server(id=v["id"], name=v["id"], status=v["status"],
                         host=v["host"], vm_state=v["vm_state"],
                         fault=v["fault"], task_state=v.get("task_state"),
                         power_state=v.get("power_state"),
                         raw={"metadata": dict(v.get("metadata") or {}),
                              "tags": list(v.get("tags") or ()),
                              "created": v.get("created"),
                              "flavor": {"vcpus": 1, "ram": 1024,
                                         "disk": 10, "ephemeral": 0,
                                         "swap": 0, "extra_specs": {}},
                              "image": ({"id": v["image"]} if v.get("image")
                                        else "")})

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

    # the world
    def kill(self, host):
        self.services[host]["alive"] = False

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
    (evacuator.evacuate_pass, or actions.evacuate for the result event)."""
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
