"""os-migrations of the simulated Nova API."""

from instanceha.sim import web
from instanceha.sim.nova_schema import next_links, paginate


class MigrationsAPI:
    """Mixed into NovaAPI: needs ``self.cloud``."""

    # -- os-migrations -------------------------------------------------------

    def migration_view(self, mig, version):
        view = {"id": mig.id, "source_node": mig.source_compute,
                "dest_node": mig.dest_compute,
                "source_compute": mig.source_compute,
                "dest_compute": mig.dest_compute, "dest_host": None,
                "status": mig.status, "instance_uuid": mig.instance_uuid,
                "old_instance_type_id": 1, "new_instance_type_id": 1,
                "created_at": web.iso_micro(mig.created_at),
                "updated_at": web.iso_micro(mig.updated_at)}
        if version >= (2, 23):
            view["migration_type"] = mig.migration_type
        if version >= (2, 59):
            view["uuid"] = mig.uuid
        if version >= (2, 80):
            view["user_id"] = mig.user_id
            view["project_id"] = mig.project_id
        return view

    def list_migrations(self, req, version):
        filters = {k: req.arg(k) for k in ("migration_type", "source_compute",
                                           "host", "status", "instance_uuid")}
        with self.cloud.lock:
            migrations = self.cloud.list_migrations(**filters)
            more = False
            if version >= (2, 59):
                # Paged from 2.59 only (sorted created_at, id descending);
                # below, Nova lists every row.
                migrations, more = paginate(
                    req, migrations, lambda m: m.uuid,
                    "Marker %s could not be found.", self.cloud.api_max_limit)
            body = {"migrations": [self.migration_view(mig, version)
                                   for mig in migrations]}
            if more:
                body["migrations_links"] = next_links(req,
                                                      migrations[-1].uuid)
            return body
