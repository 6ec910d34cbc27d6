"""How the Nova driver moves servers off a live host (planned drain).

:class:`NovaMoves`, a part the Nova driver holds, makes the live and cold migrations, their
confirmation, abort and forced completion, and the reads that follow
them. What Nova does, read in its source (api/openstack/compute/
migrate_server.py, server_migrations.py, migrations.py, servers.py;
compute/api.py; conductor/manager.py; compute/manager.py):

* ``os-migrateLive`` (compute/api.py ``live_migrate``) needs vm_state
  active or paused and no task state, else 409. It sets task_state
  ``migrating`` and the conductor creates a ``live-migration`` record
  ``accepted``; the source compute then takes it ``queued`` ->
  ``preparing`` -> ``running`` -> ``completed`` (``cancelled`` when
  aborted, ``error`` or ``failed`` when it fails, the server back on its
  source). Below microversion 2.34 the conductor's checks (source compute
  up, the scheduler's choice, the destination's checks) run within the
  request: NoValidHost and the pre-check failures answer 400 (the record
  is then ``error`` and the server keeps its state, task cleared). From
  2.34 the request is answered 202 at once and those failures show only
  in the record and the instance action. instanceha asks at 2.30 (the
  first with ``force``, never sent: no host, the scheduler chooses), so
  that "no host can take it" is an answer to the request.
* ``migrate`` (compute/api.py ``resize``, no flavor) needs vm_state
  active or stopped, no task, and the server's compute up (else 409,
  ServiceUnavailable). It is cast to the conductor: NoValidHost is not an
  answer (202), the ``migration`` record goes ``error`` and the server
  keeps its state. Otherwise ``pre-migrating`` -> ``migrating`` ->
  ``post-migrating`` -> ``finished``, the server VERIFY_RESIZE (vm_state
  resized) on the destination.
* ``confirmResize`` needs vm_state resized (409) and a ``finished``
  migration (else 400 "Instance has not been resized."), and the source
  compute up (409); the record goes ``confirming`` -> ``confirmed``. Nova
  answers 204.
* ``GET /servers/{id}/migrations`` (2.23) lists only live migrations in
  ``queued``, ``preparing``, ``running`` or ``post-migrating``, with
  ``memory_*_bytes`` and ``disk_*_bytes``; ``uuid`` from 2.59.
* ``DELETE /servers/{id}/migrations/{mid}`` (2.24) needs task_state
  ``migrating`` (409) and the migration ``running`` (400 otherwise); from
  2.65 ``queued`` and ``preparing`` may be aborted too. ``{mid}`` is the
  migration's integer id; a uuid is not found (404).
* ``force_complete`` (2.22) needs vm_state active and task_state
  ``migrating`` (409) and the migration ``running`` (400).
* ``GET /os-migrations?host=H`` matches the source or the destination;
  ``changes-since`` (from 2.59; ignored before) keeps the rows whose
  ``updated_at`` is at or after it (a row never updated has none and is
  left out).

Nova's 400 is raised here as a plain ComputeError with status 400 (the
transport raises Conflict for every 400 and 409): a Conflict means the
server's state refused, which a caller may wait out; a 400 will not pass
by waiting.
"""

import datetime

from instanceha.drivers.compute import base
from instanceha.drivers.compute.nova_records import (
    to_migration, to_server_migration)
from instanceha.drivers.compute.nova_transport import Listing, plain_400

#: os-migrations of one host (source or destination), changed since
HOST_MIGRATIONS = Listing("/os-migrations", "migrations",
                          (("host", "host"),
                           ("changes_since", "changes-since")))
#: the migration types a drain makes
MOVE_TYPES = ("live-migration", "migration")

LIVE_MIGRATE_MICROVERSION = "2.30"  # block_migration "auto", host null
FORCE_COMPLETE_MICROVERSION = "2.22"
ABORT_MICROVERSION = (2, 24)
ABORT_QUEUED_MICROVERSION = (2, 65)  # queued and preparing too
SERVER_MIGRATIONS_MICROVERSION = (2, 80)
CHANGES_SINCE_MICROVERSION = (2, 59)


def _mv(wanted, ceiling):
    return "%d.%d" % min(wanted, ceiling)


def iso_utc(epoch):
    """Epoch seconds as Nova's changes-since takes them, floored to the
    second (Nova stores whole seconds): 2026-11-22T04:31:45Z."""
    moment = datetime.datetime.fromtimestamp(int(epoch),
                                             datetime.timezone.utc)
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


class NovaMoves:
    """Live and cold migrations sent through ``nova`` (the driver's
    :class:`~instanceha.drivers.compute.nova_transport.NovaTransport`) to
    a Nova whose highest microversion is ``max_microversion``."""

    def __init__(self, nova, max_microversion):
        self._nova = nova
        self.max_microversion = max_microversion

    def _move(self, method, path, microversion, **kwargs):
        return plain_400(self._nova.call, method, path, microversion,
                         **kwargs)

    def live_migrate(self, server_id, block_migration="auto", host=None):
        if block_migration not in ("auto", True, False):
            raise ValueError("block_migration must be 'auto', True or "
                             "False, not %r" % (block_migration,))
        if host is not None and (not isinstance(host, str) or not host):
            raise ValueError("host must be a host name, not %r" % (host,))
        # A named host without "force": at 2.30 Nova's scheduler checks it
        # (requested_destination) like any candidate.
        self._move("post", "/servers/%s/action" % server_id,
                   LIVE_MIGRATE_MICROVERSION,
                   json={"os-migrateLive": {
                       "host": host, "block_migration": block_migration}})

    def cold_migrate(self, server_id):
        self._move("post", "/servers/%s/action" % server_id, "2.1",
                   json={"migrate": None})

    def confirm_resize(self, server_id):
        self._move("post", "/servers/%s/action" % server_id, "2.1",
                   json={"confirmResize": None})

    def server_migrations(self, server_id):
        mv = _mv(SERVER_MIGRATIONS_MICROVERSION, self.max_microversion)
        body = self._nova.call("get", "/servers/%s/migrations" % server_id, mv)
        try:
            return [to_server_migration(m, server_id)
                    for m in body["migrations"]]
        except (KeyError, TypeError, AttributeError) as e:
            raise base.ComputeError("server migrations answer lacks %s" % e)

    def _migration_number(self, server_id, migration_id):
        """Nova's integer id of the migration: the id itself, or the id of
        the in-progress live migration whose uuid it is (an os-migrations
        row's id)."""
        text = str(migration_id)
        if text.isdigit():
            return text
        for m in self.server_migrations(server_id):
            if m.uuid == text:
                return m.id
        raise base.NotFound("no in-progress live migration %s of server %s"
                            % (text, server_id), 404)

    def abort_migration(self, server_id, migration_id):
        number = self._migration_number(server_id, migration_id)
        if self.max_microversion >= ABORT_QUEUED_MICROVERSION:
            mv = ABORT_QUEUED_MICROVERSION
        else:
            mv = ABORT_MICROVERSION
        self._move("delete", "/servers/%s/migrations/%s" % (
            server_id, number), "%d.%d" % mv)

    def force_complete_migration(self, server_id, migration_id):
        number = self._migration_number(server_id, migration_id)
        self._move("post", "/servers/%s/migrations/%s/action" % (
            server_id, number), FORCE_COMPLETE_MICROVERSION,
            json={"force_complete": None})

    def list_host_migrations(self, host, since=None):
        # At 2.59 and above: paged (newest first), changes-since honoured.
        mv = _mv(CHANGES_SINCE_MICROVERSION, self.max_microversion)
        params = {"host": host}
        if since is not None:
            params["changes_since"] = iso_utc(since)
        bodies = self._nova.list(HOST_MIGRATIONS, "/os-migrations", mv, **params)
        try:
            rows = [to_migration(m) for m in bodies
                    if m.get("migration_type") in MOVE_TYPES]
        except (KeyError, TypeError, AttributeError) as e:
            raise base.ComputeError("os-migrations answer lacks %s" % e)
        if since is not None:
            # Nova's rule, kept where Nova would not apply it (below 2.59);
            # a no-op above.
            floor = int(since)
            rows = [m for m in rows
                    if m.updated_at is not None and m.updated_at >= floor]
        return rows
