"""os-migrations of the simulated Nova API."""

import datetime

from instanceha.sim import web
from instanceha.sim.nova_schema import next_links, paginate
from instanceha.sim.nova_wire import ApiFault, PREFIX

#: Nova's in-progress live migrations, which os-migrations links (2.23)
_LIVE_IN_PROGRESS = ("queued", "preparing", "running", "post-migrating")


def parse_changes_since(value):
    """Nova's changes-since (an ISO 8601 time, naive = UTC) as epoch
    seconds; a 400 when it is not one."""
    try:
        moment = datetime.datetime.fromisoformat(
            value.replace("Z", "+00:00"))
    except ValueError:
        raise ApiFault(400, "Invalid input for query parameters "
                            "changes-since. Value: %s. %r is not a "
                            "'date-time'" % (value, value))
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=datetime.timezone.utc)
    return moment.timestamp()


class MigrationsAPI:
    """Mixed into NovaAPI: needs ``self.cloud``."""

    # -- os-migrations -------------------------------------------------------

    def migration_view(self, mig, version, req=None):
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
            if req is not None and mig.migration_type == "live-migration" \
                    and mig.status in _LIVE_IN_PROGRESS:
                base = req.base_url + PREFIX
                path = "servers/%s/migrations/%s" % (mig.instance_uuid,
                                                     mig.id)
                view["links"] = [
                    {"rel": "self", "href": "%s/v2.1/%s" % (base, path)},
                    {"rel": "bookmark", "href": "%s/%s" % (base, path)}]
        if version >= (2, 59):
            view["uuid"] = mig.uuid
        if version >= (2, 80):
            view["user_id"] = mig.user_id
            view["project_id"] = mig.project_id
        return view

    def list_migrations(self, req, version):
        filters = {k: req.arg(k) for k in ("migration_type", "source_compute",
                                           "host", "status", "instance_uuid")}
        since = req.arg("changes-since")
        if since is not None and version >= (2, 59):
            # Before 2.59 Nova drops the filter.
            filters["changes_since"] = parse_changes_since(since)
        with self.cloud.lock:
            migrations = self.cloud.list_migrations(**filters)
            more = False
            if version >= (2, 59):
                # Paged from 2.59 only (sorted created_at, id descending);
                # below, Nova lists every row.
                migrations, more = paginate(
                    req, migrations, lambda m: m.uuid,
                    "Marker %s could not be found.", self.cloud.api_max_limit)
            body = {"migrations": [self.migration_view(mig, version, req)
                                   for mig in migrations]}
            if more:
                body["migrations_links"] = next_links(req,
                                                      migrations[-1].uuid)
            return body
