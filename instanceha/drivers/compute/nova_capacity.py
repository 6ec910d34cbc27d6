"""How the Nova driver reads host capacities: Placement, else os-hypervisors.

:class:`NovaCapacity`, a part the Nova driver holds, answers
``host_capacities()``: every compute
provider's capacity and usage from Placement (one request for the
allocation candidates' provider summaries, else provider by provider),
or, when Placement cannot be read, os-hypervisors' physical totals.
"""

import openstack
from keystoneauth1 import exceptions as ks_exc
import structlog

from instanceha.drivers.compute import base
from instanceha.drivers.compute.nova_transport import (
    HYPERVISORS, error_message)

LOG = structlog.get_logger("instanceha.nova")

HYPERVISORS_MICROVERSION = "2.53"  # sizes and *_used until 2.87
PLACEMENT_MICROVERSION = "1.0"
#: provider summaries of allocation candidates carry every resource class
SUMMARIES_MICROVERSION = "1.27"
CAPACITY_CLASSES = ("VCPU", "MEMORY_MB", "DISK_GB")


class NovaCapacity:
    """Host capacities read through ``conn`` (an openstacksdk Connection:
    Placement) and ``nova`` (the driver's
    :class:`~instanceha.drivers.compute.nova_transport.NovaTransport`:
    os-hypervisors)."""

    def __init__(self, conn, nova):
        self._conn = conn
        self._nova = nova

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
                path, resp.status_code, error_message(resp)),
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
        # knows no allocation ratio or reserved amount. Paged
        # (hypervisors_links) from Nova's JSON pages (nova_transport).
        bodies = self._nova.list(HYPERVISORS, "/os-hypervisors/detail",
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
