"""Live and cold migrations of the simulated cloud (a planned drain's
moves): a mixin of :class:`~instanceha.sim.model.SimCloud`.

The rules follow Nova (read from its source, not copied):

* **os-migrateLive** (compute/api.py ``live_migrate``) needs vm_state
  active or paused and no task state, else 409. The server takes
  task_state ``migrating`` (status MIGRATING); the conductor creates a
  ``live-migration`` record ``accepted``, checks the source compute is up
  and has the scheduler choose a destination (enabled, up, not the source,
  enough capacity: the evacuation scheduler's rules). Below microversion
  2.34 this happens within the request and a failure is the answer (400,
  "No valid host was found..." or "Compute service of HOST is unavailable
  at this time."); from 2.34 the request is answered 202 and the failure
  only shows in the record. Either way a failed pre-check leaves the record
  ``error`` and the server as it was, task cleared, on its source.
  The source compute then takes it ``queued`` -> ``preparing`` ->
  ``running``: ``memory_remaining`` falls from the server's RAM to 0 over
  ``live_migration_time`` while the record's ``updated_at`` moves every
  ``migration_monitor_interval`` (libvirt's monitor saves its stats, also
  when nothing progresses) -> ``completed``: only then, in one step, the
  server is on the destination with its previous status. The guest runs
  on one host at every instant: the source until the switch, the
  destination after (the simulator has no window where the guest has
  switched and Nova still names the source).
* a **stalled** live migration (``stall_migrations``, per server or per
  host) stays ``running`` with ``memory_remaining`` frozen until it is
  aborted, forced to complete, or the stall is lifted.
* **abort** (DELETE /servers/{id}/migrations/{mid}) needs task_state
  ``migrating`` (409) and the migration ``running``, or from 2.65 also
  ``queued`` / ``preparing`` (400 otherwise); shortly after (the compute's
  cast, ``schedule_time``) the record is ``cancelled`` and the server is
  back to its status on its source.
* **force_complete** needs vm_state active, task_state ``migrating``
  (409) and the migration ``running`` (400); it completes after
  ``schedule_time`` whatever its progress or stall.
* **migrate** (cold, compute/api.py ``resize`` without a flavor) needs
  vm_state active or stopped, no task, the server's compute up (409
  "Service is unavailable at this time."). The task goes ``resize_prep``
  (status RESIZE); after ``schedule_time`` the conductor creates the
  ``migration`` record ``pre-migrating`` with the scheduler's destination,
  or ``error`` when none fits (the server keeps its state: the API had
  answered 202); -> ``migrating`` -> after ``cold_migration_time``
  ``post-migrating`` -> ``finished``: the server is VERIFY_RESIZE (vm_state
  resized) on the destination, its source still holding the allocation.
* **confirmResize** needs vm_state resized (409), a ``finished`` migration
  (400 "Instance has not been resized.") and the source compute up (409);
  the record goes ``confirming`` then ``confirmed`` and the server is back
  to ACTIVE or SHUTOFF, as before, where it now is.
* a compute that stops (the host dies, is powered off, or only its
  nova-compute stops) fails every live or cold migration under way from or
  to it: ``error``, the server stays on its source with its task cleared
  (the failure path then evacuates it from there). A migration that finds
  the server's task changed under it (evacuated meanwhile) fails too and
  moves nothing.
"""

import itertools

from instanceha.sim.records import (
    ACTIVE, BadRequest, COLD_UNDER_WAY, Conflict, LIVE_IN_PROGRESS,
    LIVE_UNDER_WAY, MIGRATING, Migration, NotFound, PAUSED, POWER_PAUSED,
    POWER_RUNNING, POWER_SHUTDOWN, REBUILDING, RESIZE_MIGRATED,
    RESIZE_MIGRATING, RESIZE_PREP, RESIZE_TASKS, RESIZED, STOPPED,
    stable_uuid)

MIB = 1024 * 1024
NO_VALID_HOST = "No valid host was found. There are not enough hosts " \
                "available."


class Move:
    """What a live or cold migration under way carries besides its
    record: the events that apply to it are those of its generation."""

    def __init__(self, old_vm_state, requested=None, forced_host=False):
        self.generation = 0
        self.old_vm_state = old_vm_state
        self.requested = requested          # a host asked for
        self.forced_host = forced_host      # ... and not to be checked
        self.progress = 0.0                 # of the memory copied
        self.progress_at = None             # when progress was counted
        self.running_since = None
        self.forced = False                 # force_complete asked
        self.action = None

    def bump(self):
        self.generation += 1
        return self.generation


class Moves:
    """Mixin of SimCloud: needs its lock, clock (_advance, _now, _at),
    records (servers, hosts, migrations, actions) and scheduler
    (_pick_host, service_up)."""

    def _init_moves(self, live_migration_time, cold_migration_time,
                    migration_monitor_interval):
        self.live_migration_time = float(live_migration_time)
        self.cold_migration_time = float(cold_migration_time)
        self.migration_monitor_interval = float(migration_monitor_interval)
        #: server ids / host names whose live migrations stall
        self.stalled_servers = set()
        self.stalled_hosts = set()
        #: migration id -> Migration: live and cold migrations not over
        #: (a cold one until confirmed)
        self._moving = {}
        #: every live-migrate, migrate, confirm, abort and force-complete
        #: request the model took: (time, what, server id[, migration id])
        self.move_requests = []
        #: (time, server id, hosts) whenever a move would have left a
        #: server running on two hosts: must stay empty
        self.double_running = []
        self._move_seq = itertools.count()

    # -- common ----------------------------------------------------------------

    def _new_move_record(self, s, kind, status, dest, move):
        m = Migration(next(self._migration_ids),
                      stable_uuid(self.seed, "migration", s.id, kind,
                                  str(next(self._move_seq))),
                      s, dest, self._now, migration_type=kind,
                      status=status)
        m.move = move
        self.migrations.append(m)
        self._moving[m.id] = m
        return m

    def _action(self, s, name):
        action = {"action": name, "request_id": "req-" + stable_uuid(
            self.seed, "request", s.id, name, str(next(self._move_seq))),
            "start_time": self._now, "events": []}
        self.actions.setdefault(s.id, []).append(action)
        return action

    def _end_move(self, m, status):
        m.move.bump()                       # later events: ignored
        self._set_migration(m, status)
        if status not in ("finished", "confirming"):
            self._moving.pop(m.id, None)

    def _server_back(self, s, m):
        """A move over without moving: the server as it was, on its
        source, no task."""
        if s.task_state == MIGRATING or s.task_state in RESIZE_TASKS:
            s.task_state = None
        s.updated = self._now

    def _migration_of(self, s, migration_id):
        for m in self.migrations:
            if str(m.id) == str(migration_id) and m.instance_uuid == s.id:
                return m
        return None

    def moves_host_lost(self, name):
        """The compute of host ``name`` stopped: every live or cold
        migration under way from or to it fails."""
        for m in list(self._moving.values()):
            if name not in (m.source_compute, m.dest_compute):
                continue
            live = m.migration_type == "live-migration"
            if m.status not in (LIVE_UNDER_WAY if live else COLD_UNDER_WAY):
                continue
            self._end_move(m, "error")
            self._server_back(self.servers[m.instance_uuid], m)

    # -- live migration ----------------------------------------------------------

    def live_migrate(self, server_id, host=None, force=False,
                     synchronous=False):
        """os-migrateLive. ``host``: a destination asked for (checked by
        the scheduler unless ``force``); ``synchronous``: the conductor's
        checks within the request (microversion below 2.34): a failure is
        raised (BadRequest) instead of only failing the record. Returns the
        Migration."""
        with self.lock:
            self._advance()
            s = self._server(server_id)
            self.move_requests.append((self._now, "live-migrate", s.id))
            if s.vm_state not in (ACTIVE, PAUSED):
                raise Conflict("Cannot 'os-migrateLive' instance %s while "
                               "it is in vm_state %s" % (s.id, s.vm_state))
            if s.task_state is not None:
                raise Conflict("Cannot 'os-migrateLive' instance %s while "
                               "it is in task_state %s"
                               % (s.id, s.task_state))
            if host is not None and (host not in self.hosts
                                     or self.hosts[host].service_deleted):
                raise BadRequest("Compute host %s could not be found."
                                 % host)
            s.task_state = MIGRATING
            s.updated = self._now
            move = Move(s.vm_state, host, bool(force and host))
            move.action = self._action(s, "live-migration")
            m = self._new_move_record(s, "live-migration", "accepted", None,
                                      move)
            if synchronous:
                error = self._live_precheck(m)
                if error is not None:
                    raise BadRequest(error)
            else:
                self._at(self._now + self.schedule_time, self._live_step,
                         m, move.generation, "schedule")
            return m

    def _live_precheck(self, m):
        """The conductor's LiveMigrationTask: source up, a destination
        (the scheduler's, or the forced host's own checks). Returns the
        error message after failing the record, or None (the next step
        is set)."""
        s = self.servers[m.instance_uuid]
        source = self.hosts.get(m.source_compute)
        move = m.move
        error = None
        if source is None or not self.service_up(source) \
                or not source.alive:
            error = ("Compute service of %s is unavailable at this time."
                     % m.source_compute)
        elif move.forced_host:
            dest = self.hosts[move.requested]
            if dest.name == source.name:
                error = "Unable to migrate instance (%s) to current host " \
                        "(%s)." % (s.id, source.name)
            elif not self.service_up(dest):
                error = "Compute service of %s is unavailable at this " \
                        "time." % dest.name
            else:
                m.dest_compute = dest.name
        else:
            m.dest_compute = self._pick_host(s, m.source_compute,
                                             move.requested)
            if m.dest_compute is None:
                error = NO_VALID_HOST
        if error is not None:
            self._end_move(m, "error")
            self._server_back(s, m)
            self._event_done(move.action, "conductor_live_migrate_instance",
                             False)
            return error
        self._event_done(move.action, "conductor_live_migrate_instance",
                         True)
        self._at(self._now + self.schedule_time, self._live_step, m,
                 move.generation, "queued")
        return None

    def _event_done(self, action, name, ok):
        if action is not None:
            action["events"].append({
                "event": name, "host": "conductor",
                "start_time": action["start_time"],
                "finish_time": self._now,
                "result": "Success" if ok else "Error"})

    def _live_step(self, m, generation, step):
        if generation != m.move.generation:
            return
        if step == "schedule":
            self._live_precheck(m)
        elif step == "queued":
            self._set_migration(m, "queued")
            self._at(self._now + self.schedule_time, self._live_step, m,
                     generation, "preparing")
        elif step == "preparing":
            self._set_migration(m, "preparing")
            self._at(self._now + self.schedule_time, self._live_step, m,
                     generation, "running")
        elif step == "running":
            s = self.servers[m.instance_uuid]
            m.memory_total = m.memory_remaining = s.ram_mb * MIB
            m.disk_total = m.disk_remaining = 0
            m.move.running_since = m.move.progress_at = self._now
            self._set_migration(m, "running")
            self._live_due(m)
        elif step == "finish":
            self._live_finish(m)
        elif step == "cancel":
            self._end_move(m, "cancelled")
            self._server_back(self.servers[m.instance_uuid], m)

    def _stalled(self, m):
        return (m.instance_uuid in self.stalled_servers
                or m.source_compute in self.stalled_hosts
                or m.dest_compute in self.stalled_hosts)

    def _progress(self, m):
        """Bring a running live migration's counters to now: the memory
        copied (not while stalled) and the record's updated_at at
        libvirt's last monitor save."""
        move = m.move
        if m.status != "running" or move is None \
                or move.progress_at is None:
            return
        if self._stalled(m) or move.forced:
            pass                        # frozen (forced: switching over)
        elif self.live_migration_time <= 0:
            move.progress = 1.0
        else:
            move.progress += (self._now - move.progress_at) \
                / self.live_migration_time
        move.progress_at = self._now
        left = max(0.0, 1.0 - move.progress)
        m.memory_remaining = int(round(m.memory_total * left))
        every = self.migration_monitor_interval
        if every > 0:
            ticks = int((self._now - move.running_since) // every)
            saved = move.running_since + ticks * every
            if ticks and (m.updated_at is None or saved > m.updated_at):
                m.updated_at = saved

    def _live_due(self, m):
        """Set the event that ends a running live migration: when its
        copy is done, if it is not stalled."""
        if self._stalled(m) and not m.move.forced:
            return
        left = max(0.0, 1.0 - m.move.progress)
        due = self._now + left * self.live_migration_time
        if due <= self._now:
            # What is left ends within the clock's resolution: copied
            # (else the finish would be set at now again and again).
            m.move.progress = 1.0
        self._at(due, self._live_step, m, m.move.bump(), "finish")

    def _live_finish(self, m):
        self._progress(m)
        move = m.move
        if not move.forced:
            if self._stalled(m):
                return                  # lifting the stall sets it again
            if move.progress < 1.0 - 1e-9:
                self._live_due(m)
                return
        s = self.servers[m.instance_uuid]
        source = self.hosts.get(m.source_compute)
        dest = self.hosts.get(m.dest_compute)
        if s.task_state != MIGRATING or s.host != m.source_compute:
            # Evacuated (or reset) meanwhile. The simulator voids the move,
            # but Nova's libvirt would have carried the guest over all the
            # same, from a source forced down yet still running: a server
            # evacuated elsewhere then runs twice. Recorded as such.
            evacuated = s.task_state == REBUILDING \
                or s.host != m.source_compute
            if evacuated and source is not None and source.alive \
                    and dest is not None and dest.alive:
                self.double_running.append(
                    (self._now, s.id, sorted({s.host, dest.name}
                                             | set(self.rebuilding.get(
                                                 s.id, ())))))
            self._end_move(m, "error")
            return
        if source is None or dest is None or not source.alive \
                or not dest.alive:
            self._end_move(m, "error")
            self._server_back(s, m)
            return
        m.memory_remaining = 0
        self._move(s, dest.name)        # the switch-over: one instant
        s.task_state = None
        s.updated = self._now
        self._end_move(m, "completed")

    def server_migrations(self, server_id):
        """GET /servers/{id}/migrations: the server's live migrations in
        progress (Nova's list: queued, preparing, running,
        post-migrating), counters brought to now."""
        with self.lock:
            self._advance()
            s = self._server(server_id)
            found = [m for m in self.migrations
                     if m.instance_uuid == s.id
                     and m.migration_type == "live-migration"
                     and m.status in LIVE_IN_PROGRESS]
            for m in found:
                self._progress(m)
            return found

    def abort_migration(self, server_id, migration_id, queued_too=False):
        """DELETE /servers/{id}/migrations/{mid}; ``queued_too``: 2.65's
        abort of a queued or preparing migration."""
        with self.lock:
            self._advance()
            s = self._server(server_id)
            self.move_requests.append((self._now, "abort", s.id,
                                       str(migration_id)))
            if s.task_state != MIGRATING:
                raise Conflict("Cannot 'abort live migration' instance %s "
                               "while it is in task_state %s"
                               % (s.id, s.task_state))
            m = self._migration_of(s, migration_id)
            if m is None:
                raise NotFound("Migration %s for instance %s could not be "
                               "found." % (migration_id, s.id))
            allowed = ("running", "queued", "preparing") if queued_too \
                else ("running",)
            if m.status not in allowed or m.move is None:
                raise BadRequest(
                    "Migration %s state of instance %s is %s. Cannot abort "
                    "live migration while the migration is in this state."
                    % (migration_id, s.id, m.status))
            self._progress(m)
            self._at(self._now + self.schedule_time, self._live_step, m,
                     m.move.bump(), "cancel")

    def force_complete_migration(self, server_id, migration_id):
        """POST /servers/{id}/migrations/{mid}/action force_complete."""
        with self.lock:
            self._advance()
            s = self._server(server_id)
            self.move_requests.append((self._now, "force-complete", s.id,
                                       str(migration_id)))
            if s.vm_state != ACTIVE:
                raise Conflict("Cannot 'force_complete' instance %s while "
                               "it is in vm_state %s" % (s.id, s.vm_state))
            if s.task_state != MIGRATING:
                raise Conflict("Cannot 'force_complete' instance %s while "
                               "it is in task_state %s"
                               % (s.id, s.task_state))
            m = self._migration_of(s, migration_id)
            if m is None:
                # MigrationNotFoundForInstance: a 400 for this call.
                raise BadRequest("Migration %s for instance %s could not "
                                 "be found." % (migration_id, s.id))
            if m.status != "running" or m.move is None:
                raise BadRequest(
                    "Migration %s state of instance %s is %s. Cannot force "
                    "complete while the migration is in this state."
                    % (migration_id, s.id, m.status))
            self._progress(m)
            m.move.forced = True
            self._at(self._now + self.schedule_time, self._live_step, m,
                     m.move.bump(), "finish")

    def stall_migrations(self, server_id=None, host=None, stall=True):
        """Live migrations of server ``server_id``, or from or to host
        ``host``, stall (``stall``): they stay ``running``, their
        memory_remaining frozen, until aborted or forced to complete, or
        until the stall is lifted (``stall=False``: they go on from
        where they stopped)."""
        if (server_id is None) == (host is None):
            raise ValueError("name one server or one host")
        with self.lock:
            self._advance()
            if server_id is not None:
                self._server(server_id)
                chosen = self.stalled_servers
                key = server_id
            else:
                self._host(host)
                chosen = self.stalled_hosts
                key = host
            running = [m for m in self._moving.values()
                       if m.status == "running"
                       and m.migration_type == "live-migration"]
            for m in running:
                self._progress(m)       # counted up to the change
            if stall:
                chosen.add(key)
            else:
                chosen.discard(key)
            for m in running:
                if not self._stalled(m) and not m.move.forced:
                    self._live_due(m)

    # -- cold migration -----------------------------------------------------------

    def cold_migrate(self, server_id, host=None):
        """migrate (resize to the same flavor); ``host``: 2.56's
        destination, checked by the scheduler."""
        with self.lock:
            self._advance()
            s = self._server(server_id)
            self.move_requests.append((self._now, "migrate", s.id))
            if s.vm_state not in (ACTIVE, STOPPED):
                raise Conflict("Cannot 'migrate' instance %s while it is "
                               "in vm_state %s" % (s.id, s.vm_state))
            if s.task_state is not None:
                raise Conflict("Cannot 'migrate' instance %s while it is "
                               "in task_state %s" % (s.id, s.task_state))
            if host is not None:
                if host not in self.hosts or self.hosts[host].service_deleted:
                    raise BadRequest("Compute host %s could not be found."
                                     % host)
                if host == s.host:
                    raise BadRequest("The destination host is the same as "
                                     "the source host.")
            source = self.hosts.get(s.host)
            if source is None or not self.service_up(source):
                raise Conflict("Service is unavailable at this time.")
            s.task_state = RESIZE_PREP
            s.updated = self._now
            move = Move(s.vm_state, host)
            move.action = self._action(s, "migrate")
            self._at(self._now + self.schedule_time, self._cold_schedule,
                     s.id, move)

    def _cold_schedule(self, server_id, move):
        # The conductor's MigrationTask: the record, then the scheduler.
        s = self.servers.get(server_id)
        if s is None or s.task_state != RESIZE_PREP:
            return
        dest = self._pick_host(s, s.host, move.requested)
        m = self._new_move_record(s, "migration", "pre-migrating", dest,
                                  move)
        m.updated_at = self._now
        if dest is None:
            self._end_move(m, "error")
            self._server_back(s, m)
            s.fault = {"code": 500, "created": self._now,
                       "message": "No valid host was found. No valid host "
                                  "found for cold migrate"}
            self._event_done(move.action, "conductor_migrate_server", False)
            return
        self._event_done(move.action, "conductor_migrate_server", True)
        self._at(self._now + self.schedule_time, self._cold_step, m,
                 move.generation, "migrating")

    def _cold_step(self, m, generation, step):
        if generation != m.move.generation:
            return
        s = self.servers[m.instance_uuid]
        if step == "migrating":
            self._set_migration(m, "migrating")
            s.task_state = RESIZE_MIGRATING
            self._at(self._now + self.cold_migration_time, self._cold_step,
                     m, generation, "post-migrating")
        elif step == "post-migrating":
            self._set_migration(m, "post-migrating")
            s.task_state = RESIZE_MIGRATED
            self._at(self._now + self.schedule_time, self._cold_step, m,
                     generation, "finished")
        elif step == "finished":
            dest = self.hosts.get(m.dest_compute)
            if s.task_state != RESIZE_MIGRATED or dest is None \
                    or not dest.alive:
                self._end_move(m, "error")
                self._server_back(s, m)
                return
            self._move(s, dest.name)
            s.vm_state, s.task_state = RESIZED, None
            s.power_state = (POWER_SHUTDOWN if m.move.old_vm_state == STOPPED
                             else POWER_RUNNING)
            s.updated = self._now
            self._end_move(m, "finished")
        elif step == "confirmed":
            self._end_move(m, "confirmed")
            if s.vm_state == RESIZED:
                s.vm_state = m.move.old_vm_state
                s.task_state = None
                s.updated = self._now

    def confirm_resize(self, server_id):
        """confirmResize of a cold-migrated server (VERIFY_RESIZE)."""
        with self.lock:
            self._advance()
            s = self._server(server_id)
            self.move_requests.append((self._now, "confirm", s.id))
            if s.vm_state != RESIZED:
                raise Conflict("Cannot 'confirmResize' instance %s while it "
                               "is in vm_state %s" % (s.id, s.vm_state))
            m = next((x for x in self.migrations
                      if x.instance_uuid == s.id and x.status == "finished"
                      and x.migration_type in ("migration", "resize")),
                     None)
            if m is None:
                raise BadRequest("Instance has not been resized.")
            source = self.hosts.get(m.source_compute)
            if source is None or not self.service_up(source):
                raise Conflict("Service is unavailable at this time.")
            self._set_migration(m, "confirming")
            self._at(self._now + self.schedule_time, self._cold_step, m,
                     m.move.generation, "confirmed")

    # -- servers' states the moves need ----------------------------------------

    def pause_server(self, server_id, paused=True):
        """os-pause (``paused``) or os-unpause: ACTIVE <-> PAUSED, no task
        (409 otherwise)."""
        with self.lock:
            self._advance()
            s = self._server(server_id)
            want, name = (ACTIVE, "pause") if paused else (PAUSED, "unpause")
            if s.vm_state != want or s.task_state is not None:
                raise Conflict("Cannot '%s' instance %s while it is in "
                               "vm_state %s" % (name, s.id, s.vm_state))
            s.vm_state = PAUSED if paused else ACTIVE
            s.power_state = POWER_PAUSED if paused else POWER_RUNNING
            s.updated = self._now

    # -- what Placement counts -------------------------------------------------

    def move_claims(self, out):
        """Add to ``out`` (host -> [servers], SimCloud._claims) what moves
        hold: a live or cold migration under way claims its destination;
        a finished cold migration (VERIFY_RESIZE) keeps its source's
        allocation until confirmed."""
        for m in self._moving.values():
            s = self.servers.get(m.instance_uuid)
            if s is None:
                continue
            if m.migration_type == "live-migration":
                where = m.dest_compute if m.status in LIVE_UNDER_WAY \
                    else None
            elif m.status in COLD_UNDER_WAY:
                where = m.dest_compute
            elif m.status in ("finished", "confirming"):
                where = m.source_compute
            else:
                where = None
            if where is not None and s.host != where:
                out.setdefault(where, []).append(s)
        return out

    def live_progress(self):
        """Bring every running live migration's counters to now (a read
        of os-migrations or the state)."""
        for m in list(self._moving.values()):
            if m.status == "running":
                self._progress(m)
