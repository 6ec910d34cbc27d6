"""Live and cold migrations in the simulated Nova API: the server actions
``os-migrateLive``, ``migrate``, ``confirmResize``, ``pause`` and
``unpause``, and ``/servers/{id}/migrations`` (list, show, abort,
force_complete), with Nova's microversions, body schemas and answers
(api/openstack/compute/migrate_server.py, server_migrations.py,
servers.py). The behaviour behind them is model_moves.py's."""

from instanceha.sim import web
from instanceha.sim.nova_schema import (
    check_bool, check_keys, check_string, read_body)
from instanceha.sim.nova_wire import ApiFault

MOVE_ACTIONS = ("os-migrateLive", "migrate", "confirmResize", "pause",
                "unpause")


def _no_method():
    # Nova's answer to a route below the microversion that brought it.
    raise ApiFault(404, "The resource could not be found.")


class MovesAPI:
    """Mixed into NovaAPI: needs ``self.cloud``."""

    def move_action(self, req, server_id, action, args, version):
        """One of MOVE_ACTIONS on a server: (status, body)."""
        cloud = self.cloud
        if action == "os-migrateLive":
            return self._migrate_live(server_id, args, version)
        if action == "migrate":
            host = None
            if version >= (2, 56) and args is not None:
                check_keys(args, ["host"])
                host = args.get("host")
                if host is not None:
                    check_string("host", host)
            elif args is not None:
                raise ApiFault(400, "Invalid input for field/attribute "
                                    "migrate. Value: %r. %r is not of type "
                                    "'null'" % (args, args))
            cloud.cold_migrate(server_id, host=host)
            return 202, None
        if args is not None:
            raise ApiFault(400, "Invalid input for field/attribute %s. "
                                "Value: %r. %r is not of type 'null'"
                                % (action, args, args))
        if action == "confirmResize":
            cloud.confirm_resize(server_id)
            return 204, None
        cloud.pause_server(server_id, paused=action == "pause")
        return 202, None

    def _migrate_live(self, server_id, args, version):
        # Nova's body schemas: 2.0-2.24 block_migration and
        # disk_over_commit (booleans) and host required; 2.25 drops
        # disk_over_commit and allows block_migration "auto"; 2.30 adds
        # force (until 2.67).
        if version < (2, 25):
            allowed = ["host", "block_migration", "disk_over_commit"]
        else:
            allowed = ["host", "block_migration"]
        if (2, 30) <= version < (2, 68):
            allowed.append("force")
        required = [k for k in allowed if k != "force"]
        check_keys(args, allowed, required)
        host = args["host"]
        if host is not None:
            check_string("host", host)
        block = args["block_migration"]
        if not (version >= (2, 25) and block == "auto"):
            check_bool("block_migration", block)
        if "disk_over_commit" in args:
            check_bool("disk_over_commit", args["disk_over_commit"])
        force = False
        if "force" in args:
            force = check_bool("force", args["force"])
            if force and not host:
                raise ApiFault(400, "Can't force to a non-provided "
                                    "destination")
        if host and version < (2, 30):
            force = True        # a named host bypassed the scheduler
        self.cloud.get_server(server_id)        # 404 first
        self.cloud.live_migrate(server_id, host=host, force=force,
                                synchronous=version < (2, 34))
        return 202, None

    # -- /servers/{id}/migrations ----------------------------------------------

    def server_migration_view(self, m, version):
        view = {"id": m.id, "server_uuid": m.instance_uuid,
                "status": m.status,
                "source_compute": m.source_compute,
                "source_node": m.source_compute,
                "dest_compute": m.dest_compute,
                "dest_node": m.dest_compute, "dest_host": None,
                "memory_total_bytes": m.memory_total,
                "memory_processed_bytes":
                    None if m.memory_total is None
                    else m.memory_total - (m.memory_remaining or 0),
                "memory_remaining_bytes": m.memory_remaining,
                "disk_total_bytes": m.disk_total,
                "disk_processed_bytes":
                    None if m.disk_total is None
                    else m.disk_total - (m.disk_remaining or 0),
                "disk_remaining_bytes": m.disk_remaining,
                "created_at": web.iso_micro(m.created_at),
                "updated_at": web.iso_micro(m.updated_at)}
        if version >= (2, 59):
            view["uuid"] = m.uuid
        if version >= (2, 80):
            view["user_id"] = m.user_id
            view["project_id"] = m.project_id
        return view

    def server_migrations_route(self, req, parts, version):
        """``parts``: ["servers", id, "migrations", ...]: (status, body)."""
        server_id, rest, method = parts[1], parts[3:], req.method
        if not rest and method == "GET":
            if version < (2, 23):
                _no_method()
            found = self.cloud.server_migrations(server_id)
            return 200, {"migrations": [
                self.server_migration_view(m, version) for m in found]}
        if len(rest) == 1 and method == "GET":
            if version < (2, 23):
                _no_method()
            found = [m for m in self.cloud.server_migrations(server_id)
                     if str(m.id) == rest[0]]
            if not found:
                raise ApiFault(404, "In-progress live migration %s is not "
                                    "found for server %s." % (rest[0],
                                                             server_id))
            return 200, {"migration": self.server_migration_view(
                found[0], version)}
        if len(rest) == 1 and method == "DELETE":
            if version < (2, 24):
                _no_method()
            self.cloud.abort_migration(server_id, rest[0],
                                       queued_too=version >= (2, 65))
            return 202, None
        if len(rest) == 2 and rest[1] == "action" and method == "POST":
            if version < (2, 22):
                _no_method()
            body = read_body(req)
            if not isinstance(body, dict) or set(body) != {"force_complete"} \
                    or body["force_complete"] is not None:
                raise ApiFault(400, "Invalid input for field/attribute "
                                    "force_complete.")
            self.cloud.force_complete_migration(server_id, rest[0])
            return 202, None
        raise ApiFault(404, "The resource could not be found.")
