"""Nova driver through openstacksdk, with explicit microversions.

The only module that imports openstacksdk or keystoneauth. Every call names
its microversion: the behaviour instanceha relies on (service UUIDs, evacuate
keeping a server's power state below 2.95, migration fields) changes between
microversions, so "latest" is never used. At connect time the server's maximum
is read from version discovery; below 2.53 instanceha refuses to start.
"""

import contextlib
import threading
import time
import urllib.parse

import openstack
import tenacity
from keystoneauth1 import exceptions as ks_exc
from openstack.compute.v2 import aggregate as sdk_aggregate
from openstack.compute.v2 import hypervisor as sdk_hypervisor
from openstack.compute.v2 import migration as sdk_migration
from openstack.compute.v2 import server as sdk_server
import structlog

from instanceha.drivers.compute import base
from instanceha.util import timeparse

LOG = structlog.get_logger("instanceha.nova")

MIN_MICROVERSION = (2, 53)      # services addressed by UUID
MIGRATIONS_MICROVERSION = (2, 59)  # migration uuid, pagination
CONTROL_BINARIES = ("nova-scheduler", "nova-conductor")
ACTIONS_MICROVERSION = (2, 62)  # instance action events name their host
EVACUATE_HOST_MICROVERSION = (2, 29)  # below, a named host is forced
HYPERVISORS_MICROVERSION = "2.53"  # sizes and *_used until 2.87
PLACEMENT_MICROVERSION = "1.0"
#: provider summaries of allocation candidates carry every resource class
SUMMARIES_MICROVERSION = "1.27"
CAPACITY_CLASSES = ("VCPU", "MEMORY_MB", "DISK_GB")
NOT_FINISHED = ("accepted", "pre-migrating", "migrating", "queued",
                "preparing", "running", "post-migrating")


def _parse_mv(text):
    major, minor = str(text).split(".")
    return int(major), int(minor)


def _fmt_mv(mv):
    return "%d.%d" % mv


def parse_time(value):
    """Nova's naive-UTC timestamps ('2026-11-22T04:31:45.000000') to epoch
    seconds; None for none."""
    if not value:
        return None
    try:
        return timeparse.epoch(value)
    except ValueError:
        raise base.ComputeError(
            "unparseable timestamp from Nova: %r" % (value,)) from None


class TTLCache:
    """Values kept for ``ttl`` seconds of ``clock`` (0: nothing is kept).

    Thread-safe: several workers share one driver. A loader runs outside
    the lock (two threads may both load a missing key; both answers are
    Nova's); a value loaded while ``invalidate`` ran is not stored, so an
    answer read before our own write never outlives it.
    """

    def __init__(self, ttl, clock=time.monotonic):
        self.ttl = float(ttl)
        self._clock = clock
        self._lock = threading.Lock()
        self._values = {}           # key -> (expiry, value)
        self._generation = 0

    def get(self, key, loader):
        if self.ttl <= 0:
            return loader()
        with self._lock:
            hit = self._values.get(key)
            if hit is not None and self._clock() < hit[0]:
                return hit[1]
            generation = self._generation
        value = loader()            # errors are not kept
        with self._lock:
            if generation == self._generation:
                self._values[key] = (self._clock() + self.ttl, value)
        return value

    def invalidate(self, key=None):
        """Forget ``key`` (None: everything)."""
        with self._lock:
            self._generation += 1
            if key is None:
                self._values.clear()
            else:
                self._values.pop(key, None)


class _KeepsBody:
    """Mixin for openstacksdk's typed resources: each listed item also
    keeps Nova's answer as given (``nova_body``), because instanceha reads
    Nova's own key names (``OS-EXT-SRV-ATTR:host``, ``flavor`` with its
    ``extra_specs``, ...) where the SDK renames or drops them."""

    @classmethod
    def existing(cls, connection=None, **attrs):
        body = {k: v for k, v in attrs.items() if k != "microversion"}
        obj = super().existing(connection=connection, **attrs)
        obj.nova_body = body
        return obj


class _Server(_KeepsBody, sdk_server.Server):
    pass


class _Migration(_KeepsBody, sdk_migration.Migration):
    pass


class _Aggregate(_KeepsBody, sdk_aggregate.Aggregate):
    pass


class _Hypervisor(_KeepsBody, sdk_hypervisor.Hypervisor):
    pass


def connect(conf):
    """An openstacksdk Connection from clouds.yaml ([DEFAULT] cloud)."""
    kwargs = {"api_timeout": conf.api_timeout}
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
            self._compute = self._conn.compute
        except (ks_exc.ClientException,
                openstack.exceptions.SDKException) as e:
            raise base.ComputeError("cannot connect to Nova through cloud "
                                    "%r: %s" % (conf.cloud, e))
        self.max_microversion = self._negotiate()
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

    def _negotiate(self):
        try:
            data = self._compute.get_endpoint_data()
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

    # -- plumbing --------------------------------------------------------------
    def _read(self, what, fn):
        """``fn()`` (a GET), sent again on a transient failure (5xx, no
        answer) up to ``[DEFAULT] api_read_retries`` times. A 4xx is an
        answer and raised at once."""
        def log(state):
            LOG.info("nova_read_retry", call=what,
                     attempt=state.attempt_number,
                     reason="transient failure, sending the read again: %s"
                     % state.outcome.exception())
        retrying = tenacity.Retrying(
            stop=tenacity.stop_after_attempt(
                1 + self._conf.api_read_retries),
            wait=tenacity.wait_exponential(multiplier=0.25, max=2.0),
            retry=tenacity.retry_if_exception(_transient),
            sleep=self._sleep, before_sleep=log, reraise=True)
        return retrying(fn)

    def _call(self, method, path, microversion, **kwargs):
        if method == "get":
            return self._read("GET %s" % path, lambda: self._send(
                method, path, microversion, **kwargs))
        return self._send(method, path, microversion, **kwargs)

    def _send(self, method, path, microversion, **kwargs):
        with self._noting("%s %s" % (method.upper(), path)):
            return self._send_once(method, path, microversion, **kwargs)

    @contextlib.contextmanager
    def _noting(self, what):
        """Note a request Nova's API failed (5xx, no answer, not JSON) in
        api_record, when it failed: the control-plane gate holds every
        power-off from then until os-services is read whole again."""
        try:
            yield
        except base.ComputeError as e:
            if _transient(e):
                self.api_record.failed(self._clock(), what, e)
            raise

    def _send_once(self, method, path, microversion, **kwargs):
        if method != "get":
            # A write is sent once: keystoneauth would send it again on a
            # connection failure or a 503 if clouds.yaml asked for it
            # (connect_retries, status_code_retries), and an evacuation
            # sent twice rebuilds a server twice.
            kwargs.update(connect_retries=0, status_code_retries=0)
        try:
            resp = getattr(self._compute, method)(
                path, microversion=microversion, raise_exc=False, **kwargs)
        except ks_exc.ClientException as e:
            raise base.ComputeError("%s %s: %s" % (method.upper(), path,
                                                   type(e).__name__),
                                    unanswered=_may_have_been_sent(e))
        if resp.status_code < 400:
            if resp.status_code == 204 or not resp.content:
                return {}
            try:
                return resp.json()
            except ValueError:
                raise base.ComputeError("%s %s: answer is not JSON"
                                        % (method.upper(), path))
        message = _error_message(resp)
        text = "%s %s: HTTP %d: %s" % (method.upper(), path, resp.status_code,
                                       message)
        if resp.status_code == 404:
            raise base.NotFound(text, resp.status_code)
        if resp.status_code in (400, 409):
            raise base.Conflict(text, resp.status_code)
        raise base.ComputeError(text, resp.status_code,
                                unanswered=resp.status_code in (502, 504))

    def _list(self, resource, what, microversion, **params):
        """Every item of a typed openstacksdk list, all pages: the SDK
        follows Nova's ``servers_links`` / ``migrations_links`` "next" links
        (a page holds at most Nova's [api] max_limit items, 1000 by
        default). Returns Nova's bodies; errors translated; transient
        failures retried (the whole listing)."""
        return self._read("GET %s" % what, lambda: self._list_once(
            resource, what, microversion, **params))

    def _list_once(self, resource, what, microversion, **params):
        with self._noting("GET %s" % what):
            return self._list_all(resource, what, microversion, **params)

    def _list_all(self, resource, what, microversion, **params):
        try:
            return [item.nova_body for item in resource.list(
                self._compute, microversion=microversion, **params)]
        except openstack.exceptions.HttpException as e:
            status = e.status_code
            message = (_error_message(e.response) if e.response is not None
                       else e.details or str(e))
            text = "GET %s: HTTP %s: %s" % (what, status, message)
            if status == 404:
                raise base.NotFound(text, status)
            if status in (400, 409):
                raise base.Conflict(text, status)
            raise base.ComputeError(text, status)
        except (ks_exc.ClientException,
                openstack.exceptions.SDKException) as e:
            raise base.ComputeError("GET %s: %s: %s" % (what,
                                                        type(e).__name__, e))

    # -- services ----------------------------------------------------------------
    def list_services(self):
        body = self._call("get", "/os-services", "2.53",
                          params={"binary": "nova-compute"})
        try:
            return [_service(s) for s in body["services"]]
        except (KeyError, TypeError) as e:
            raise base.ComputeError("os-services answer lacks %s" % e)

    def list_control_services(self):
        # One small call per binary rather than one unfiltered list, which
        # would carry every compute row again.
        services = []
        for binary in CONTROL_BINARIES:
            body = self._call("get", "/os-services", "2.53",
                              params={"binary": binary})
            try:
                services.extend(_service(s) for s in body["services"]
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
                                                     _error_message(resp)),
                                    resp.status_code)

    def _put_service(self, service_id, body):
        return self._call("put", "/os-services/%s" % service_id, "2.53",
                          json=body)

    def force_down(self, service_id, reason):
        # One request: Nova applies status, reason and forced_down together.
        body = self._put_service(service_id, {"status": "disabled",
                                              "disabled_reason": reason,
                                              "forced_down": True})
        try:
            return _service(body["service"])
        except (KeyError, TypeError, base.ComputeError):
            return None

    def restore(self, service_id, enable, disabled_reason=None):
        body = {"forced_down": False}
        if enable:
            body["status"] = "enabled"
        elif disabled_reason is not None:
            body.update(status="disabled", disabled_reason=disabled_reason)
        self._put_service(service_id, body)

    # -- servers -------------------------------------------------------------------
    def list_servers(self, host):
        bodies = self._list(_Server, "/servers/detail", "2.53",
                            base_path="/servers/detail", all_projects=True,
                            compute_host=host)
        return [_server(s) for s in bodies]

    def get_server(self, server_id):
        return _server(self._call("get", "/servers/%s" % server_id,
                                  "2.53")["server"])

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
        self._call("post", "/servers/%s/action" % server_id, mv,
                   json={"evacuate": args})

    def stop_server(self, server_id):
        self._call("post", "/servers/%s/action" % server_id, "2.1",
                   json={"os-stop": None})

    def list_aggregates(self):
        return list(self._cache.get("aggregates", self._read_aggregates))

    def _read_aggregates(self):
        # os-aggregates is not paged by Nova: one page, no links.
        bodies = self._list(_Aggregate, "/os-aggregates", "2.41")
        try:
            return [_aggregate(a) for a in bodies]
        except (KeyError, TypeError, AttributeError, ValueError) as e:
            raise base.ComputeError("os-aggregates answer lacks %s" % e)

    def get_aggregate(self, aggregate_id):
        # Never from the cache: read just before a change to its metadata.
        body = self._call("get", "/os-aggregates/%s" % aggregate_id, "2.41")
        try:
            return _aggregate(body["aggregate"])
        except (KeyError, TypeError, AttributeError, ValueError) as e:
            raise base.ComputeError("os-aggregates answer lacks %s" % e)

    def unset_aggregate_metadata(self, aggregate_id, key):
        try:
            self._call("post", "/os-aggregates/%s/action" % aggregate_id,
                       "2.41", json={"set_metadata": {"metadata": {
                           key: None}}})
        finally:
            # Our own write: the next read must see it (even after an
            # error, which may have been applied).
            self._cache.invalidate("aggregates")

    def delete_server_metadata(self, server_id, key):
        self._call("delete", "/servers/%s/metadata/%s" % (
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
                image_id, _error_message(resp)), 404)
        if resp.status_code >= 400:
            raise base.ComputeError("GET image %s: HTTP %d: %s" % (
                image_id, resp.status_code, _error_message(resp)),
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

    def enable_service(self, service_id):
        self._put_service(service_id, {"status": "enabled"})

    def disable_service(self, service_id, reason):
        self._put_service(service_id, {"status": "disabled",
                                       "disabled_reason": reason})

    # -- capacity ------------------------------------------------------------
    def host_capacities(self):
        try:
            return self._placement_capacities()
        except base.ComputeError as e:
            placement_error = e
        LOG.warning("placement_unreadable_using_hypervisors",
                    error=str(placement_error))
        try:
            return self._hypervisor_capacities()
        except base.ComputeError as e:
            raise base.ComputeError(
                "host capacities: Placement cannot be read (%s) and neither "
                "can os-hypervisors (%s)" % (placement_error, e),
                getattr(e, "status", None))

    def _placement_get(self, path, microversion=PLACEMENT_MICROVERSION,
                       params=None):
        try:
            resp = self._conn.placement.get(
                path, microversion=microversion, params=params,
                raise_exc=False)
        except (ks_exc.ClientException,
                openstack.exceptions.SDKException) as e:
            raise base.ComputeError("Placement GET %s: %s: %s"
                                    % (path, type(e).__name__, e))
        if resp.status_code >= 400:
            raise base.ComputeError("Placement GET %s: HTTP %d: %s" % (
                path, resp.status_code, _error_message(resp)),
                resp.status_code)
        try:
            return resp.json()
        except ValueError:
            raise base.ComputeError("Placement GET %s: answer is not JSON"
                                    % path)

    def _placement_capacities(self):
        try:
            if not self._conn.endpoint_for("placement"):
                raise base.NoEndpoint("no Placement endpoint in the service "
                                      "catalog or clouds.yaml")
        except (ks_exc.ClientException,
                openstack.exceptions.SDKException) as e:
            raise base.ComputeError("%s: %s" % (type(e).__name__, e))
        # Placement's /resource_providers is not paged. A compute node's
        # provider is named after its node name, which is the compute
        # host's name for libvirt; providers without VCPU (nested or
        # sharing ones) are not compute hosts.
        body = self._placement_get("/resource_providers")
        try:
            names = {rp["uuid"]: rp["name"]
                     for rp in body["resource_providers"]}
        except (KeyError, TypeError) as e:
            raise base.ComputeError("Placement answer lacks %s" % e)
        try:
            return self._summaries(names)
        except base.ComputeError as e:
            if e.status not in (400, 404, 406):
                raise
            LOG.warning("allocation_candidates_unavailable", reason=str(e),
                        effect="capacities read provider by provider")
        result = {}
        try:
            for rp in body["resource_providers"]:
                path = "/resource_providers/%s" % rp["uuid"]
                inv = self._placement_get(path + "/inventories")["inventories"]
                if "VCPU" not in inv:
                    continue
                usages = self._placement_get(path + "/usages")["usages"]
                usable, used = {}, {}
                for rc in CAPACITY_CLASSES:
                    i = inv.get(rc) or {}
                    usable[rc] = int((i.get("total", 0) - i.get("reserved", 0))
                                     * float(i.get("allocation_ratio", 1.0)))
                    used[rc] = int(usages.get(rc, 0))
                result[rp["name"]] = base.HostCapacity(
                    host=rp["name"], vcpus=usable["VCPU"],
                    vcpus_used=used["VCPU"], ram_mb=usable["MEMORY_MB"],
                    ram_mb_used=used["MEMORY_MB"], disk_gb=usable["DISK_GB"],
                    disk_gb_used=used["DISK_GB"], source="placement")
        except (KeyError, TypeError, ValueError, AttributeError) as e:
            raise base.ComputeError("Placement answer lacks %s" % e)
        return result

    def _summaries(self, names):
        """Every compute provider's capacity and usage in one request: the
        provider summaries of ``GET /allocation_candidates`` (1.27: every
        resource class of each provider, capacity = (total - reserved) *
        allocation_ratio). A provider without one vCPU free is not a
        candidate and is left out: it has room for no server."""
        body = self._placement_get("/allocation_candidates",
                                   SUMMARIES_MICROVERSION,
                                   params={"resources": "VCPU:1"})
        result = {}
        try:
            for uuid, summary in body["provider_summaries"].items():
                name = names.get(uuid)
                res = summary["resources"]
                if name is None or "VCPU" not in res:
                    continue
                got = {rc: (int(res.get(rc, {}).get("capacity", 0)),
                            int(res.get(rc, {}).get("used", 0)))
                       for rc in CAPACITY_CLASSES}
                result[name] = base.HostCapacity(
                    host=name, vcpus=got["VCPU"][0],
                    vcpus_used=got["VCPU"][1], ram_mb=got["MEMORY_MB"][0],
                    ram_mb_used=got["MEMORY_MB"][1],
                    disk_gb=got["DISK_GB"][0],
                    disk_gb_used=got["DISK_GB"][1], source="placement")
        except (KeyError, TypeError, ValueError, AttributeError) as e:
            raise base.ComputeError("Placement allocation candidates lack "
                                    "%s" % e)
        return result

    def _hypervisor_capacities(self):
        # 2.53: hypervisors by UUID, still with vcpus/memory_mb/local_gb and
        # their *_used (removed at 2.88). Physical totals: os-hypervisors
        # knows no allocation ratio or reserved amount. Typed and paged
        # (hypervisors_links) through the SDK.
        bodies = self._list(_Hypervisor, "/os-hypervisors/detail",
                            HYPERVISORS_MICROVERSION,
                            base_path="/os-hypervisors/detail")
        result = {}
        try:
            for h in bodies:
                host = (h.get("service") or {}).get("host") \
                    or h["hypervisor_hostname"]
                result[host] = base.HostCapacity(
                    host=host, vcpus=int(h["vcpus"]),
                    vcpus_used=int(h["vcpus_used"]),
                    ram_mb=int(h["memory_mb"]),
                    ram_mb_used=int(h["memory_mb_used"]),
                    disk_gb=int(h["local_gb"]),
                    disk_gb_used=int(h["local_gb_used"]),
                    source="hypervisors")
        except (KeyError, TypeError, ValueError, AttributeError) as e:
            raise base.ComputeError("os-hypervisors answer lacks %s" % e)
        return result

    def reset_state(self, server_id, state="active"):
        self._call("post", "/servers/%s/action" % server_id, "2.1",
                   json={"os-resetState": {"state": state}})

    def list_evacuations(self, host):
        # Paged from 2.59 (newest first); below 2.59 Nova lists every row.
        bodies = self._list(_Migration, "/os-migrations", self._migrations_mv,
                            migration_type="evacuation", source_compute=host)
        try:
            return [_migration(m) for m in bodies]
        except (KeyError, TypeError) as e:
            raise base.ComputeError("os-migrations answer lacks %s" % e)

    def rebuild_events(self, server_id):
        path = "/servers/%s/os-instance-actions" % server_id
        body = self._call("get", path, self._actions_mv)
        evacuations = [a for a in body.get("instanceActions") or []
                       if a.get("action") == "evacuate" and a.get("request_id")]
        if not evacuations:
            return []
        latest = max(evacuations, key=lambda a: a.get("start_time") or "")
        body = self._call("get", "%s/%s" % (path, latest["request_id"]),
                          self._actions_mv)
        try:
            events = body["instanceAction"].get("events") or []
            return [base.ActionEvent(
                event=e["event"], host=e.get("host"),
                finished=e.get("finish_time") is not None,
                result=e.get("result")) for e in events]
        except (KeyError, TypeError, AttributeError) as e:
            raise base.ComputeError("instance action answer lacks %s" % e)


def _may_have_been_sent(e):
    """keystoneauth failed a request without an answer from Nova: was it
    perhaps sent? Only a refused connection surely never reached the API;
    a timeout (keystoneauth reports a read timeout as ConnectTimeout, like
    a connect timeout), a connection cut or anything unknown may have."""
    if isinstance(e, ks_exc.ConnectFailure) and \
            "connection refused" in str(e).lower():
        return False
    return isinstance(e, ks_exc.ConnectionError)


def _transient(e):
    """A failure a second try of the same read may not meet: Nova's 5xx
    or no answer at all (status None). Not a 4xx (an answer)."""
    return (isinstance(e, base.ComputeError)
            and not isinstance(e, (base.NotFound, base.Conflict))
            and (e.status is None or int(e.status) >= 500))


def _error_message(resp):
    try:
        body = resp.json()
    except ValueError:
        return resp.text[:200]
    if isinstance(body, dict) and len(body) == 1:
        inner = next(iter(body.values()))
        if isinstance(inner, dict) and "message" in inner:
            return inner["message"]
    return str(body)[:200]


def _aggregate(a):
    return base.Aggregate(name=str(a["name"]),
                          hosts=tuple(a.get("hosts") or ()),
                          zone=a.get("availability_zone"),
                          metadata=dict(a.get("metadata") or {}),
                          id=str(a["id"]) if a.get("id") is not None
                          else None)


def _service(s):
    return base.ComputeService(
        id=str(s["id"]), host=s["host"], state=s["state"], status=s["status"],
        forced_down=bool(s.get("forced_down")),
        disabled_reason=s.get("disabled_reason"),
        updated_at=parse_time(s.get("updated_at")), zone=s.get("zone"),
        binary=s.get("binary") or "nova-compute")


def _server(s):
    fault = s.get("fault") or {}
    return base.Server(
        id=s["id"], name=s.get("name", ""), status=s.get("status", ""),
        host=s.get("OS-EXT-SRV-ATTR:host"),
        task_state=s.get("OS-EXT-STS:task_state"),
        vm_state=s.get("OS-EXT-STS:vm_state"),
        fault=fault.get("message"),
        power_state=s.get("OS-EXT-STS:power_state"), raw=s)


def _migration(m):
    return base.Migration(
        id=str(m.get("uuid") or m["id"]), server_id=m["instance_uuid"],
        source_host=m.get("source_compute"), dest_host=m.get("dest_compute"),
        status=m["status"], migration_type=m.get("migration_type", ""),
        created_at=parse_time(m.get("created_at")))
