"""Single servers breaking on a healthy host, and what Nova does about
them, for instance repair (issue 25); mixed into SimCloud.

* :meth:`crash_server` (``how`` ``crashed`` or ``shutdown``): the guest
  goes off by itself and Nova's power-state sync stops the server with
  its own context (no user, no project): the instance action ``stop``
  with ``user_id`` null, and the notifications Nova sends for it
  (``instance.update`` saving the power state, ``instance.power_off.start``
  with the guest already off, ``instance.update`` active -> stopped,
  ``instance.power_off.end``), initiator null in all of them
  (doc/instance-repair-research.md 1.1, 1.4);
* :meth:`error_server`: the server falls into ERROR (``instance.update``
  active -> error, initiator null);
* a user's ``os-stop`` (:meth:`user_stop`, and the API's): the action and
  the notifications carry the user;
* ``os-start``, ``reboot`` HARD and ``rebuild``: the server is ACTIVE
  again ``server_boot_time`` later, unless :meth:`fail_repairs` says the
  action does not fix it (the server falls into ERROR instead, with a
  fault).

Notifications go to every callable in ``notifiers`` as
``fn(priority, event_type, payload)``, payloads shaped like Nova's
versioned ones (InstanceActionPayload / InstanceUpdatePayload 1.9 with
``action_initiator_user``/``_project``). The simulator publishes nothing
itself; :mod:`instanceha.sim.notify` puts them on a broker.
"""

import itertools

from instanceha.sim.records import (ACTIVE, Conflict, ERROR, PAUSED,
                                    POWER_RUNNING, POWER_SHUTDOWN, STOPPED,
                                    stable_uuid)

POWER_CRASHED = 6
#: Nova's power state names by index (notifications carry the name)
POWER_NAMES = {0: "pending", 1: "running", 3: "paused", 4: "shutdown",
               6: "crashed", 7: "suspended"}
#: accepted vm_states (nova/compute/api.py)
START_STATES = (STOPPED,)
REBOOT_STATES = (ACTIVE, STOPPED, PAUSED, "suspended", ERROR)
REBUILD_STATES = (ACTIVE, STOPPED, ERROR)


def _versioned(name, data):
    return {"nova_object.name": name, "nova_object.namespace": "nova",
            "nova_object.version": "1.9", "nova_object.data": data}


class Repairs:
    """Mixin of SimCloud: needs its lock, clock (``_advance``, ``_at``),
    servers, hosts and actions."""

    def _init_repair(self):
        #: fn(priority, event_type, payload) for each notification
        self.notifiers = []
        #: server id -> {action: fault message}: actions that leave it in
        #: ERROR instead of repairing it
        self.repair_faults = {}
        #: (time, server id, request) of every start/reboot/rebuild asked
        self.repair_requests = []
        self._repair_seq = itertools.count()

    # -- notifications ----------------------------------------------------------

    def _payload(self, s, user=None, project=None):
        return {"uuid": s.id, "host": s.host, "node": s.host,
                "state": s.vm_state, "task_state": s.task_state,
                "power_state": POWER_NAMES.get(s.power_state, "pending"),
                "tenant_id": s.project_id, "user_id": s.user_id,
                "display_name": s.name,
                "action_initiator_user": user,
                "action_initiator_project": project,
                "fault": None if not (s.vm_state == ERROR and s.fault)
                else _versioned("ExceptionPayload", {
                    "exception": "SimulatedFault",
                    "exception_message": s.fault["message"]})}

    def _notify(self, event_type, s, user=None, project=None,
                priority="info"):
        if not self.notifiers:
            return
        payload = _versioned("InstanceActionPayload",
                             self._payload(s, user, project))
        for fn in list(self.notifiers):
            fn(priority, event_type, payload)

    def _notify_update(self, s, old_state, old_task, user=None,
                       project=None):
        if not self.notifiers:
            return
        data = self._payload(s, user, project)
        data["state_update"] = _versioned("InstanceStateUpdatePayload", {
            "old_state": old_state, "state": s.vm_state,
            "old_task_state": old_task, "new_task_state": s.task_state})
        payload = _versioned("InstanceUpdatePayload", data)
        for fn in list(self.notifiers):
            fn("info", "instance.update", payload)

    def _record(self, s, name, user):
        """An instance action; ``user`` None: Nova's own context. A server
        made with the cloud gets its ``create`` (by its user) first, as
        every Nova server has."""
        if not self.actions.get(s.id):
            self.actions[s.id] = [{
                "action": "create", "request_id": "req-" + stable_uuid(
                    self.seed, "create", s.id), "start_time": s.created,
                "events": [], "user_id": s.user_id,
                "project_id": s.project_id}]
        action = {"action": name, "request_id": "req-" + stable_uuid(
            self.seed, "repair-request", s.id, name,
            str(next(self._repair_seq))), "start_time": self._now,
            "events": [], "user_id": user,
            "project_id": s.project_id if user else None}
        self.actions.setdefault(s.id, []).append(action)
        return action

    # -- breaking ---------------------------------------------------------------

    def _healthy_server(self, server_id):
        s = self._server(server_id)
        h = self.hosts.get(s.host)
        if h is None or not h.alive:
            raise Conflict("server %s: its host is not running" % server_id)
        return s

    def crash_server(self, server_id, how="crashed", notify=True):
        """The guest goes off by itself (``how``: ``crashed`` or
        ``shutdown``) and Nova's power-state sync stops the server, as
        Nova's own context. ``notify`` False: no notification (a lost
        one: only the sweep can find it)."""
        with self.lock:
            self._advance()
            s = self._healthy_server(server_id)
            if s.vm_state not in (ACTIVE, PAUSED) or s.task_state:
                raise Conflict("server %s is %s (task %s): nothing to "
                               "crash" % (s.id, s.vm_state, s.task_state))
            send = notify and bool(self.notifiers)
            old = s.vm_state
            s.power_state = POWER_CRASHED if how == "crashed" \
                else POWER_SHUTDOWN
            if send:
                self._notify_update(s, old, None)
            s.task_state = "powering-off"
            self._record(s, "stop", None)
            if send:
                self._notify_update(s, old, None)
                self._notify("instance.power_off.start", s)
            s.vm_state, s.task_state = STOPPED, None
            s.power_state = POWER_SHUTDOWN
            s.updated = self._now
            if send:
                self._notify_update(s, old, "powering-off")
                self._notify("instance.power_off.end", s)

    def error_server(self, server_id, message="Simulated failure",
                     notify=True):
        """The server falls into ERROR (a failed operation, Nova's own
        context)."""
        with self.lock:
            self._advance()
            s = self._healthy_server(server_id)
            old, old_task = s.vm_state, s.task_state
            s.vm_state, s.task_state = ERROR, None
            s.fault = {"code": 500, "created": self._now, "message": message}
            s.updated = self._now
            if notify:
                self._notify_update(s, old, old_task)

    def user_stop(self, server_id):
        """A user's os-stop (the API's, with the server's owner)."""
        self.stop_server(server_id)

    def fail_repairs(self, server_id, actions, message="guest failed"):
        """The repair actions (start, reboot, rebuild) that leave the
        server in ERROR (``message`` its fault) instead of ACTIVE; an
        empty ``actions`` clears them."""
        with self.lock:
            self._server(server_id)
            if actions:
                self.repair_faults[server_id] = dict.fromkeys(actions,
                                                              message)
            else:
                self.repair_faults.pop(server_id, None)

    # -- repairing --------------------------------------------------------------

    def _begin(self, server_id, name, task, accepted, user):
        s = self._server(server_id)
        self.repair_requests.append((self._now, s.id, name))
        if s.vm_state not in accepted or s.task_state is not None:
            raise Conflict("Cannot '%s' instance %s while it is in "
                           "vm_state %s" % (name, s.id, s.vm_state))
        h = self.hosts.get(s.host)
        if h is None or not h.alive or not self.service_up(h):
            raise Conflict("Compute service of %s is unavailable at this "
                           "time." % s.host)
        old = s.vm_state
        s.task_state = task
        s.updated = self._now
        self._record(s, name, user)
        self._notify_update(s, old, None, user, s.project_id)
        self._at(self._now + self.server_boot_time, self._booted, s.id,
                 name, task, user)
        return s

    def _booted(self, server_id, name, task, user):
        s = self.servers.get(server_id)
        if s is None or s.task_state != task:
            return
        h = self.hosts.get(s.host)
        if h is None or not h.alive:
            return                      # the host died: nothing finishes
        old = s.vm_state
        fault = self.repair_faults.get(s.id, {}).get(name)
        if fault is not None:
            s.vm_state, s.task_state = ERROR, None
            s.power_state = POWER_SHUTDOWN
            s.fault = {"code": 500, "created": self._now, "message": fault}
        else:
            s.vm_state, s.task_state = ACTIVE, None
            s.power_state = POWER_RUNNING
            s.fault = None
        s.updated = self._now
        self._notify_update(s, old, task, user, s.project_id)

    def start_server(self, server_id, user=None):
        """os-start: a stopped server runs again after server_boot_time."""
        with self.lock:
            self._advance()
            s = self._begin(server_id, "start", "powering-on", START_STATES,
                            user or self.user_id)
            self._notify("instance.power_on.start", s, user or self.user_id,
                         s.project_id)

    def reboot_server(self, server_id, hard=True, user=None):
        """reboot HARD (or SOFT, accepted in active only)."""
        with self.lock:
            self._advance()
            self._begin(server_id, "reboot",
                        "rebooting_hard" if hard else "rebooting",
                        REBOOT_STATES if hard else (ACTIVE,),
                        user or self.user_id)

    def rebuild_server(self, server_id, image_id=None, user=None):
        """rebuild in place from its image (the local disks are lost)."""
        with self.lock:
            self._advance()
            s = self._begin(server_id, "rebuild", "rebuilding",
                            REBUILD_STATES, user or self.user_id)
            if image_id:
                s.image_id = image_id

    def update_server_metadata(self, server_id, items):
        """POST /servers/{id}/metadata: merge ``items``; returns all."""
        with self.lock:
            self._advance()
            s = self._server(server_id)
            for key, value in items.items():
                s.metadata[key] = str(value)
            s.updated = self._now
            return dict(s.metadata)
