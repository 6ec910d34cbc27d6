"""os-services of the simulated Nova API: the nova-compute rows of the
model's hosts and the control-plane rows (scheduler, conductor); service
updates in both shapes (by id from 2.53, by action before)."""

from instanceha.sim import web
from instanceha.sim.nova_schema import (
    UUID_RE, check_bool, check_keys, check_string, invalid, read_body)
from instanceha.sim.nova_wire import ApiFault


class ServicesAPI:
    """Mixed into NovaAPI: needs ``self.cloud``."""

    def service_view(self, h, version):
        c = self.cloud
        view = {"binary": "nova-compute", "host": h.name,
                "id": h.service_uuid if version >= (2, 53) else h.service_id,
                "zone": c.zone_of(h.name),
                "status": "disabled" if h.disabled else "enabled",
                "state": "up" if c.service_up(h) else "down",
                "updated_at": web.iso_micro(max(c.heartbeat(h),
                                                h.service_updated)),
                "disabled_reason": h.disabled_reason}
        if version >= (2, 11):
            view["forced_down"] = h.forced_down
        return view

    def control_view(self, c, version):
        """A nova-scheduler or nova-conductor row (zone internal)."""
        view = self.service_view(c, version)
        view.update(binary=c.binary, zone="internal")
        return view

    def list_services(self, req, version):
        host, binary = req.arg("host"), req.arg("binary")
        with self.cloud.lock:
            self.cloud.now()
            return {"services": [
                self.service_view(h, version)
                for h in self.cloud.computes()
                if (not host or h.name == host)
                and (not binary or binary == "nova-compute")] + [
                self.control_view(c, version) for c in self.cloud.control
                if (not host or c.name == host)
                and (not binary or binary == c.binary)]}

    def update_service(self, req, service_id, version):
        body = read_body(req)
        if version < (2, 53):
            return self._update_service_legacy(service_id, body, version)
        check_keys(body, ("status", "disabled_reason", "forced_down"))
        status = body.get("status")
        if "status" in body and status not in ("enabled", "disabled"):
            invalid("status", status, "%r is not one of ['enabled', "
                                      "'disabled']" % (status,))
        reason = body.get("disabled_reason")
        if "disabled_reason" in body:
            check_string("disabled_reason", reason)
        forced = None
        if "forced_down" in body:
            forced = check_bool("forced_down", body["forced_down"])
        if not UUID_RE.match(service_id):
            raise ApiFault(400, "Invalid uuid %s" % service_id)
        with self.cloud.lock:
            h = self.cloud.update_service(service_id, status=status,
                                          disabled_reason=reason,
                                          forced_down=forced)
            return {"service": self.service_view(h, version)}

    def delete_service(self, service_id, version):
        """DELETE /os-services/{id}: a UUID from 2.53, an integer before
        (Nova's 400 otherwise); the model's refusals (409) and 404."""
        if version >= (2, 53):
            if not UUID_RE.match(service_id):
                raise ApiFault(400, "Invalid uuid %s" % service_id)
        elif not service_id.isdigit():
            raise ApiFault(400, "Invalid input received: id must be an "
                                "integer")
        self.cloud.delete_service(service_id)
        return 204, None

    def _update_service_legacy(self, action, body, version):
        allowed = ["host", "binary", "disabled_reason"]
        if version >= (2, 11):
            allowed.append("forced_down")
        check_keys(body, allowed, required=("host", "binary"))
        actions = ["enable", "disable", "disable-log-reason"]
        if version >= (2, 11):
            actions.append("force-down")
        if action not in actions:
            raise ApiFault(404, "Unknown action")
        host, binary = body["host"], body["binary"]
        if action == "disable-log-reason" and "disabled_reason" not in body:
            raise ApiFault(400, "Missing disabled reason field")
        if action == "force-down" and "forced_down" not in body:
            raise ApiFault(400, "Missing forced_down field")
        if binary != "nova-compute":
            raise ApiFault(400, "Updating a %s service is not supported. Only "
                                "nova-compute services can be updated."
                           % binary)
        with self.cloud.lock:
            self.cloud.now()
            h = self.cloud.hosts.get(host)
            if h is None or h.service_deleted:
                raise ApiFault(404, "Could not find binary %s on host %s."
                               % (binary, host))
            service = {"host": host, "binary": binary}
            if action == "force-down":
                forced = check_bool("forced_down", body["forced_down"])
                self.cloud.update_service(h.service_uuid, forced_down=forced)
                service["forced_down"] = forced
            elif action == "enable":
                self.cloud.update_service(h.service_uuid, status="enabled")
                service["status"] = "enabled"
            else:
                reason = body.get("disabled_reason") \
                    if action == "disable-log-reason" else None
                self.cloud.update_service(h.service_uuid, status="disabled",
                                          disabled_reason=reason)
                service["status"] = "disabled"
                if reason:
                    service["disabled_reason"] = reason
            return {"service": service}
