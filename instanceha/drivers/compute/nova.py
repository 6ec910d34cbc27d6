"""Nova driver through openstacksdk, with explicit microversions.

The driver holds a transport (nova_transport.py: requests, retries,
errors, pages) and hands it to the parts it delegates to: capacities
(nova_capacity.py), live and cold migrations (nova_moves.py), a smoke
test's server, deleting a compute service and leaving an aggregate
(nova_lifecycle.py), one server's repair (nova_repair.py). With
nova_transport.py and nova_capacity.py, the only modules that import
openstacksdk or keystoneauth. Every write of the interface is marked
(@write) here, on the driver, where the lease guard reads the marks.
Every call names its microversion: the behaviour instanceha relies on (service UUIDs, evacuate
keeping a server's power state below 2.95, migration fields) changes between
microversions, so "latest" is never used. At connect time the server's maximum
is read from version discovery; below 2.53 instanceha refuses to start.
"""

import re
import time
import urllib.parse

import openstack
from keystoneauth1 import exceptions as ks_exc
import structlog

from instanceha.drivers.compute import base
from instanceha.drivers.compute.clouds import clouds_file_problem
from instanceha.drivers.compute.nova_capacity import NovaCapacity
from instanceha.drivers.compute.nova_lifecycle import NovaLifecycle
from instanceha.drivers.compute.nova_moves import NovaMoves
from instanceha.drivers.compute.nova_repair import NovaRepair
from instanceha.drivers.compute.nova_records import (
    time_memo, to_aggregate, to_migration, to_server, to_service)
from instanceha.drivers.compute.nova_transport import (
    AGGREGATES, MIGRATIONS, SERVERS, NovaTransport, error_message)
from instanceha.drivers.compute.ttl_cache import TTLCache
from instanceha.util.writes import write

LOG = structlog.get_logger("instanceha.nova")

MIN_MICROVERSION = (2, 53)      # services addressed by UUID
MIGRATIONS_MICROVERSION = (2, 59)  # migration uuid, pagination
CONTROL_BINARIES = ("nova-scheduler", "nova-conductor")
ACTIONS_MICROVERSION = (2, 62)  # instance action events name their host
EVACUATE_HOST_MICROVERSION = (2, 29)  # below, a named host is forced
NOT_FINISHED = ("accepted", "pre-migrating", "migrating", "queued",
                "preparing", "running", "post-migrating")


def _parse_mv(text):
    major, minor = str(text).split(".")
    return int(major), int(minor)


def _fmt_mv(mv):
    return "%d.%d" % mv


def connect(conf):
    """An openstacksdk Connection from clouds.yaml ([DEFAULT] cloud)."""
    kwargs = {"api_timeout": conf.api_timeout}
    problem = clouds_file_problem(conf)
    if problem is not None:
        raise base.ComputeError(problem)
    if conf.clouds_file:
        config = openstack.config.OpenStackConfig(
            config_files=[conf.clouds_file])
        region = config.get_one(cloud=conf.cloud, **kwargs)
        return openstack.connection.Connection(config=region)
    return openstack.connect(cloud=conf.cloud, **kwargs)


class NovaDriver(base.ComputeDriver):

    def __init__(self, conf, connection=None, clock=time.monotonic,
                 sleep=time.sleep):
        self._conf = conf
        self._sleep = sleep
        self._clock = clock
        #: aggregates and Glance images: [DEFAULT] nova_cache_ttl
        self._cache = TTLCache(conf.nova_cache_ttl, clock)
        try:
            self._conn = connection or connect(conf)
            compute = self._conn.compute
        except (ks_exc.ClientException,
                openstack.exceptions.SDKException) as e:
            raise base.ComputeError("cannot connect to Nova through cloud "
                                    "%r: %s" % (conf.cloud, e))
        # api_record looked up at each failure: a start that waited for
        # Nova gives this driver the record its sources already share.
        self._nova = NovaTransport(conf, compute, clock, sleep,
                                   record=lambda: self.api_record,
                                   gate=self._gate)
        self.max_microversion = self._negotiate(compute)
        wanted = _parse_mv(conf.evacuation.microversion)
        if wanted > self.max_microversion:
            raise base.ComputeError(
                "[evacuation] microversion %s is above what Nova supports (%s)"
                % (conf.evacuation.microversion,
                   _fmt_mv(self.max_microversion)))
        self._evacuate_mv = _fmt_mv(wanted)
        self._migrations_mv = _fmt_mv(min(MIGRATIONS_MICROVERSION,
                                          self.max_microversion))
        self._actions_mv = _fmt_mv(min(ACTIONS_MICROVERSION,
                                       self.max_microversion))
        self._capacity = NovaCapacity(self._conn, self._nova)
        self._moves = NovaMoves(self._nova, self.max_microversion)
        self._lifecycle = NovaLifecycle(self._nova, self._cache)
        self._repair = NovaRepair(self._nova)

    def _gate(self):
        """None while a write request may go out now, else why not: the
        write_gate (ComputeDriver) as it is at each request."""
        gate = self.write_gate
        return gate() if gate is not None else None

    @staticmethod
    def _negotiate(compute):
        try:
            data = compute.get_endpoint_data()
        except ks_exc.ClientException as e:
            raise base.ComputeError("cannot reach Nova for version discovery: "
                                    "%s" % e)
        if data is None or not data.max_microversion:
            raise base.ComputeError("Nova announced no microversions; "
                                    "instanceha needs at least %s"
                                    % _fmt_mv(MIN_MICROVERSION))
        found = tuple(data.max_microversion[:2])
        if found < MIN_MICROVERSION:
            raise base.ComputeError(
                "Nova supports up to microversion %s; instanceha needs %s "
                "(services addressed by UUID)" % (_fmt_mv(found),
                                                  _fmt_mv(MIN_MICROVERSION)))
        LOG.info("nova_connected", max_microversion=_fmt_mv(found))
        return found

    # -- services ----------------------------------------------------------------
    def list_services(self):
        body = self._nova.call("get", "/os-services", "2.53",
                          params={"binary": "nova-compute"})
        parse = time_memo()
        try:
            return [to_service(s, parse) for s in body["services"]]
        except (KeyError, TypeError) as e:
            raise base.ComputeError("os-services answer lacks %s" % e)

    def service_of(self, host):
        # One row, not the whole cloud's (megabytes at thousands of hosts).
        body = self._nova.call("get", "/os-services", "2.53",
                          params={"binary": "nova-compute", "host": host})
        try:
            rows = [to_service(s) for s in body["services"]
                    if s.get("host") == host]
        except (KeyError, TypeError) as e:
            raise base.ComputeError("os-services answer lacks %s" % e)
        return rows[0] if rows else None

    def list_control_services(self):
        # One small call per binary rather than one unfiltered list, which
        # would carry every compute row again.
        services = []
        for binary in CONTROL_BINARIES:
            body = self._nova.call("get", "/os-services", "2.53",
                              params={"binary": binary})
            try:
                services.extend(to_service(s) for s in body["services"]
                                if s.get("binary", binary) == binary)
            except (KeyError, TypeError) as e:
                raise base.ComputeError("os-services answer lacks %s" % e)
        return services

    def check_placement(self):
        try:
            if not self._conn.endpoint_for("placement"):
                raise base.NoEndpoint("no Placement endpoint in the service "
                                      "catalog or clouds.yaml")
            # Cheap and answered from Placement's database: no provider
            # has this name.
            resp = self._conn.placement.get(
                "/resource_providers", params={"name": "instanceha-probe"},
                microversion="1.0", raise_exc=False)
        except (ks_exc.ClientException,
                openstack.exceptions.SDKException) as e:
            raise base.ComputeError("%s: %s" % (type(e).__name__, e))
        if resp.status_code >= 500:
            raise base.ComputeError("HTTP %d: %s" % (resp.status_code,
                                                     error_message(resp)),
                                    resp.status_code)

    def _put_service(self, service_id, body):
        return self._nova.call("put", "/os-services/%s" % service_id, "2.53",
                          json=body)

    @write
    def force_down(self, service_id, reason):
        # One request: Nova applies status, reason and forced_down together.
        body = self._put_service(service_id, {"status": "disabled",
                                              "disabled_reason": reason,
                                              "forced_down": True})
        try:
            return to_service(body["service"])
        except (KeyError, TypeError, base.ComputeError):
            return None

    @write
    def restore(self, service_id, enable, disabled_reason=None):
        body = {"forced_down": False}
        if enable:
            body["status"] = "enabled"
        elif disabled_reason is not None:
            body.update(status="disabled", disabled_reason=disabled_reason)
        self._put_service(service_id, body)

    # -- servers -------------------------------------------------------------------
    def list_servers(self, host):
        bodies = self._nova.list(SERVERS, "/servers/detail", "2.53",
                            base_path="/servers/detail", all_projects=True,
                            compute_host=host)
        return [to_server(s) for s in bodies]

    def get_server(self, server_id):
        return to_server(self._nova.call("get", "/servers/%s" % server_id,
                                  "2.53")["server"])

    def list_all_servers(self, per_page=None):
        def page(bodies):
            servers = [to_server(s) for s in bodies]
            return servers if per_page is None else per_page(servers)
        return self._nova.list(SERVERS, "/servers/detail", "2.53",
                               per_page=page, base_path="/servers/detail",
                               all_projects=True)

    def find_servers(self, name):
        # Nova's name filter is a regular expression: anchored and
        # escaped, and the names compared again here.
        bodies = self._nova.list(SERVERS, "/servers/detail", "2.53",
                            base_path="/servers/detail", all_projects=True,
                            name="^%s$" % re.escape(name))
        return [to_server(s) for s in bodies if s.get("name") == name]

    @write
    def evacuate(self, server_id, microversion=None, host=None):
        mv = self._evacuate_mv
        if microversion is not None:
            wanted = tuple(microversion)
            if wanted > self.max_microversion:
                raise base.ComputeError(
                    "evacuate at microversion %s: Nova supports up to %s"
                    % (_fmt_mv(wanted), _fmt_mv(self.max_microversion)), 400)
            mv = _fmt_mv(wanted)
        args = {}
        if host is not None:
            # Never "force": the scheduler must validate the target. Below
            # 2.29 Nova would bypass the scheduler for a named host.
            if _parse_mv(mv) < EVACUATE_HOST_MICROVERSION:
                raise base.ComputeError(
                    "evacuate to host %s at microversion %s: Nova forces a "
                    "named host below %s, bypassing the scheduler"
                    % (host, mv, _fmt_mv(EVACUATE_HOST_MICROVERSION)), 400)
            args["host"] = host
        self._nova.call("post", "/servers/%s/action" % server_id, mv,
                   json={"evacuate": args})

    @write
    def stop_server(self, server_id):
        self._nova.call("post", "/servers/%s/action" % server_id, "2.1",
                   json={"os-stop": None})

    def list_aggregates(self):
        return list(self._cache.get("aggregates", self._read_aggregates))

    def _read_aggregates(self):
        # os-aggregates is not paged by Nova: one page, no links.
        bodies = self._nova.list(AGGREGATES, "/os-aggregates", "2.41")
        try:
            return [to_aggregate(a) for a in bodies]
        except (KeyError, TypeError, AttributeError, ValueError) as e:
            raise base.ComputeError("os-aggregates answer lacks %s" % e)

    def get_aggregate(self, aggregate_id):
        # Never from the cache: read just before a change to its metadata.
        body = self._nova.call("get", "/os-aggregates/%s" % aggregate_id, "2.41")
        try:
            return to_aggregate(body["aggregate"])
        except (KeyError, TypeError, AttributeError, ValueError) as e:
            raise base.ComputeError("os-aggregates answer lacks %s" % e)

    @write
    def unset_aggregate_metadata(self, aggregate_id, key):
        try:
            self._nova.call("post", "/os-aggregates/%s/action" % aggregate_id,
                       "2.41", json={"set_metadata": {"metadata": {
                           key: None}}})
        finally:
            # Our own write: the next read must see it (even after an
            # error, which may have been applied).
            self._cache.invalidate("aggregates")

    @write
    def delete_server_metadata(self, server_id, key):
        self._nova.call("delete", "/servers/%s/metadata/%s" % (
            server_id, urllib.parse.quote(key, safe="")), "2.1")

    def get_image(self, image_id):
        return self._cache.get(("image", image_id),
                               lambda: self._read_image(image_id))

    def _read_image(self, image_id):
        path = "/images/%s" % urllib.parse.quote(str(image_id), safe="")
        try:
            if not self._conn.endpoint_for("image"):
                raise base.NoEndpoint("no image (Glance) endpoint in the "
                                      "service catalog or clouds.yaml")
            # The SDK's image proxy (Glance v2 from version discovery); a
            # plain GET keeps Glance's body as it is (custom properties as
            # top-level fields), which the typed Image resource reshapes.
            resp = self._conn.image.get(path, raise_exc=False)
        except (ks_exc.ClientException,
                openstack.exceptions.SDKException) as e:
            raise base.ComputeError("GET image %s: %s: %s"
                                    % (image_id, type(e).__name__, e))
        if resp.status_code == 404:
            raise base.NotFound("GET image %s: HTTP 404: %s" % (
                image_id, error_message(resp)), 404)
        if resp.status_code >= 400:
            raise base.ComputeError("GET image %s: HTTP %d: %s" % (
                image_id, resp.status_code, error_message(resp)),
                resp.status_code)
        try:
            body = resp.json()
        except ValueError:
            raise base.ComputeError("GET image %s: answer is not JSON"
                                    % image_id)
        if not isinstance(body, dict) or "id" not in body:
            raise base.ComputeError("GET image %s: answer is not an image"
                                    % image_id)
        return body

    @write
    def enable_service(self, service_id):
        self._put_service(service_id, {"status": "enabled"})

    @write
    def disable_service(self, service_id, reason):
        self._put_service(service_id, {"status": "disabled",
                                       "disabled_reason": reason})

    # -- evacuations ---------------------------------------------------------
    @write
    def reset_state(self, server_id, state="active"):
        self._nova.call("post", "/servers/%s/action" % server_id, "2.1",
                   json={"os-resetState": {"state": state}})

    def list_evacuations(self, host):
        # Paged from 2.59 (newest first); below 2.59 Nova lists every row.
        bodies = self._nova.list(MIGRATIONS, "/os-migrations",
                            self._migrations_mv,
                            migration_type="evacuation", source_compute=host)
        try:
            return [to_migration(m) for m in bodies]
        except (KeyError, TypeError) as e:
            raise base.ComputeError("os-migrations answer lacks %s" % e)

    def rebuild_events(self, server_id):
        path = "/servers/%s/os-instance-actions" % server_id
        body = self._nova.call("get", path, self._actions_mv)
        evacuations = [a for a in body.get("instanceActions") or []
                       if a.get("action") == "evacuate" and a.get("request_id")]
        if not evacuations:
            return []
        latest = max(evacuations, key=lambda a: a.get("start_time") or "")
        body = self._nova.call("get", "%s/%s" % (path, latest["request_id"]),
                          self._actions_mv)
        try:
            events = body["instanceAction"].get("events") or []
            return [base.ActionEvent(
                event=e["event"], host=e.get("host"),
                finished=e.get("finish_time") is not None,
                result=e.get("result")) for e in events]
        except (KeyError, TypeError, AttributeError) as e:
            raise base.ComputeError("instance action answer lacks %s" % e)

    # -- capacities (nova_capacity.py) -----------------------------------------
    def host_capacities(self):
        return self._capacity.host_capacities()

    # -- live and cold migrations (nova_moves.py) --------------------------------
    @write
    def live_migrate(self, server_id, block_migration="auto", host=None):
        self._moves.live_migrate(server_id, block_migration, host)

    @write
    def cold_migrate(self, server_id):
        self._moves.cold_migrate(server_id)

    @write
    def confirm_resize(self, server_id):
        self._moves.confirm_resize(server_id)

    def server_migrations(self, server_id):
        return self._moves.server_migrations(server_id)

    @write
    def abort_migration(self, server_id, migration_id):
        self._moves.abort_migration(server_id, migration_id)

    @write
    def force_complete_migration(self, server_id, migration_id):
        self._moves.force_complete_migration(server_id, migration_id)

    def list_host_migrations(self, host, since=None):
        return self._moves.list_host_migrations(host, since)

    # -- a drained host put back or retired (nova_lifecycle.py) ----------------
    @write
    def create_server(self, name, flavor_id, image_id, host, zone=None,
                      network=None):
        return self._lifecycle.create_server(name, flavor_id, image_id, host,
                                             zone=zone, network=network)

    @write
    def delete_server(self, server_id):
        self._lifecycle.delete_server(server_id)

    @write
    def delete_service(self, service_id):
        self._lifecycle.delete_service(service_id)

    @write
    def remove_host_from_aggregate(self, aggregate_id, host):
        self._lifecycle.remove_host_from_aggregate(aggregate_id, host)

    # -- one server's repair (nova_repair.py) -----------------------------------
    def list_servers_by_status(self, status):
        return self._repair.list_servers_by_status(status)

    def instance_actions(self, server_id):
        return self._repair.instance_actions(server_id)

    @write
    def start_server(self, server_id):
        self._repair.start_server(server_id)

    @write
    def reboot_server(self, server_id, hard=True):
        self._repair.reboot_server(server_id, hard)

    @write
    def rebuild_server(self, server_id, image_id):
        self._repair.rebuild_server(server_id, image_id)

    @write
    def set_server_metadata(self, server_id, items):
        self._repair.set_server_metadata(server_id, items)
