"""os-hypervisors and os-aggregates of the simulated Nova API: the
model's hosts as compute nodes and their aggregates."""

from instanceha.sim import web
from instanceha.sim.nova_schema import (
    check_keys, check_string, invalid, next_links, paginate, read_body)
from instanceha.sim.nova_wire import ApiFault


class HostsAPI:
    """Mixed into NovaAPI: needs ``self.cloud``."""

    def aggregate_view(self, a, version):
        zone = a["availability_zone"]
        view = {"id": a["id"], "name": a["name"], "availability_zone": zone,
                "hosts": a["hosts"],
                "metadata": dict(a.get("metadata") or {},
                                 **({"availability_zone": zone}
                                    if zone else {})),
                "created_at": web.iso_micro(a["created"]),
                "updated_at": web.iso_micro(a.get("updated")), "deleted_at": None, "deleted": False}
        if version >= (2, 41):
            view["uuid"] = a["uuid"]
        return view

    def aggregate_action(self, req, aggregate_id, version):
        """``set_metadata`` (a null value removes the key), with Nova's
        schema: metadata keys 1-255 characters, values strings of at most
        255 characters or null; ``remove_host``."""
        body = read_body(req)
        if not isinstance(body, dict) or len(body) != 1:
            raise ApiFault(400, "Malformed request body")
        action = next(iter(body))
        if action == "remove_host":
            args = body[action]
            check_keys(args, ["host"], ["host"])
            check_string("host", args["host"])
            if not str(aggregate_id).isdigit():
                raise ApiFault(400, "Invalid input received: id must be an "
                                    "integer")
            agg = self.cloud.remove_host_from_aggregate(aggregate_id,
                                                        args["host"])
            return {"aggregate": self.aggregate_view(agg, version)}
        if action != "set_metadata":
            raise ApiFault(400, "Additional properties are not allowed "
                                "(%r was unexpected)" % action)
        args = body[action]
        check_keys(args, ["metadata"], ["metadata"])
        metadata = args["metadata"]
        if not isinstance(metadata, dict):
            invalid("metadata", metadata, "%r is not of type 'object'"
                    % (metadata,))
        for key, value in metadata.items():
            if not 1 <= len(key) <= 255:
                invalid("metadata", key, "%r does not match any of the "
                                         "regexes" % key)
            if value is not None:
                check_string(key, value)
        agg = self.cloud.update_aggregate_metadata(aggregate_id, metadata)
        return {"aggregate": self.aggregate_view(agg, version)}

    def hypervisor_view(self, h, version, claims=None):
        """A compute node as os-hypervisors/detail shows it: its sizes and
        usage up to 2.87 (Nova 2.88 removed them: read Placement).
        ``claims``: SimCloud._claims(), read once for a whole listing."""
        c = self.cloud
        view = {"id": h.node_uuid if version >= (2, 53) else h.service_id,
                "hypervisor_hostname": h.name,
                "state": "up" if c.service_up(h) else "down",
                "status": "disabled" if h.disabled else "enabled",
                "hypervisor_type": "QEMU", "hypervisor_version": 8002000,
                "host_ip": "192.0.2.%d" % (h.service_id % 250 + 1),
                "service": {"host": h.name,
                            "id": h.service_uuid if version >= (2, 53)
                            else h.service_id,
                            "disabled_reason": h.disabled_reason}}
        if version < (2, 88):
            used = c.usage(h.name, claims)
            view.update(
                vcpus=h.vcpus, vcpus_used=used["VCPU"],
                memory_mb=h.ram_mb, memory_mb_used=used["MEMORY_MB"],
                local_gb=h.disk_gb, local_gb_used=used["DISK_GB"],
                free_ram_mb=h.ram_mb - used["MEMORY_MB"],
                free_disk_gb=h.disk_gb - used["DISK_GB"],
                disk_available_least=h.disk_gb - used["DISK_GB"],
                current_workload=0,
                running_vms=len(c._servers_on(h.name)),
                cpu_info="{}")
        else:
            view["uptime"] = None
        return view

    def list_hypervisors(self, req, version):
        """os-hypervisors/detail, paged from 2.33 like Nova (limit,
        marker, hypervisors_links)."""
        with self.cloud.lock:
            self.cloud.now()
            hosts = sorted(self.cloud.computes(),
                           key=lambda h: h.service_id)
            more = False
            if version >= (2, 33):
                hosts, more = paginate(
                    req, hosts,
                    lambda h: h.node_uuid if version >= (2, 53)
                    else str(h.service_id),
                    "marker [%s] not found", self.cloud.api_max_limit)
            claims = self.cloud._claims()
            body = {"hypervisors": [self.hypervisor_view(h, version, claims)
                                    for h in hosts]}
            if more:
                body["hypervisors_links"] = next_links(
                    req, body["hypervisors"][-1]["id"])
            return body
