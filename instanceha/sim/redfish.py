"""A Redfish BMC per simulated host, all under one ``/redfish/v1``.

Every host's BMC has its own basic-auth credentials (from the model); the
``Systems`` collection lists the systems those credentials may see, which is
that host's system only, so sushy's ``get_system()`` without an identity
finds it. The service root is public, as Redfish requires. A host whose BMC
is unreachable has any request carrying its credentials or naming its
system dropped without an answer.
"""

import base64
import binascii
import uuid

from instanceha.sim import web

PREFIX = "/redfish/v1"
RESET_TYPES = ["On", "ForceOff", "GracefulShutdown", "ForceRestart",
               "ForceOn"]


def error(status, message_id, message):
    return web.Response(status, {"error": {
        "code": "Base.1.8.GeneralError",
        "message": message,
        "@Message.ExtendedInfo": [{
            "@odata.type": "#Message.v1_1_1.Message",
            "MessageId": "Base.1.8." + message_id,
            "Message": message, "Severity": "Critical",
            "Resolution": "None"}]}})


def credentials(headers):
    value = headers.get("Authorization") or ""
    if not value.startswith("Basic "):
        return None, None
    try:
        user, _, password = base64.b64decode(value[6:]).decode().partition(":")
    except (binascii.Error, UnicodeDecodeError):
        return None, None
    return user, password


class Redfish:
    def __init__(self, cloud):
        self.cloud = cloud

    def handle(self, req):
        parts = web.split(req.path, PREFIX)
        caller = self.cloud.bmc_host_for(*credentials(req.headers))
        if caller is not None and not caller.bmc_reachable:
            return web.DROP
        named = None
        if len(parts) >= 2 and parts[0] in ("Systems", "Chassis"):
            named = self.cloud.hosts.get(parts[1])
            if named is not None and not named.bmc_reachable:
                return web.DROP
        if not parts and req.method == "GET":
            return web.Response(200, self._root())
        if caller is None:
            resp = error(401, "InsufficientPrivilege",
                         "There are insufficient privileges for the account "
                         "or credentials associated with the current session "
                         "to perform the requested operation.")
            resp.headers["WWW-Authenticate"] = 'Basic realm="simulated BMC"'
            return resp
        if parts == ["Systems"] and req.method == "GET":
            return web.Response(200, self._collection(caller))
        if named is None or named is not caller:
            return error(404, "ResourceMissingAtURI",
                         "The resource at the URI %s was not found."
                         % req.path)
        if parts[0] == "Chassis" and req.method == "GET":
            found = self._chassis(named, parts[2:])
        elif parts[2:] in (["Memory"], ["Memory", "DIMM_A1"]) \
                and req.method == "GET":
            found = self._memory(named, parts[3:])
        else:
            found = None
        if found is not None:
            return web.Response(200, found)
        if len(parts) == 2 and req.method == "GET" \
                and parts[0] == "Systems":
            return web.Response(200, self._system(named))
        if parts[2:] == ["Actions", "ComputerSystem.Reset"] \
                and req.method == "POST":
            return self._reset(named, req)
        return error(405, "OperationNotAllowed",
                     "The operation is not allowed on %s." % req.path)

    def _root(self):
        return {
            "@odata.type": "#ServiceRoot.v1_5_0.ServiceRoot",
            "@odata.id": PREFIX + "/",
            "Id": "RootService", "Name": "Simulated Root Service",
            "RedfishVersion": "1.5.0",
            "UUID": web_uuid(self.cloud.seed),
            "Product": "instanceha simulated BMC",
            "Systems": {"@odata.id": PREFIX + "/Systems"},
        }

    def _collection(self, host):
        return {
            "@odata.type":
                "#ComputerSystemCollection.ComputerSystemCollection",
            "@odata.id": PREFIX + "/Systems",
            "Name": "Computer System Collection",
            "Members@odata.count": 1,
            "Members": [{"@odata.id": "%s/Systems/%s" % (PREFIX, host.name)}],
        }

    def _system(self, h):
        with self.cloud.lock:
            self.cloud.now()
            power = self.cloud.power_state(h)
        path = "%s/Systems/%s" % (PREFIX, h.name)
        return {
            "@odata.type": "#ComputerSystem.v1_10_0.ComputerSystem",
            "@odata.id": path, "Id": h.name, "Name": h.name,
            "UUID": h.system_uuid, "SystemType": "Physical",
            "HostName": h.bmc_hostname, "PowerState": power,
            "Status": {"State": "Enabled",
                       "Health": health(h, "system"),
                       "HealthRollup": worst(
                           health(h, p) for p in PARTS)},
            "MemorySummary": {"TotalSystemMemoryGiB": 256, "Status": {
                "State": "Enabled", "HealthRollup": health(h, "memory")}},
            "Memory": {"@odata.id": path + "/Memory"},
            "Links": {"Chassis": [
                {"@odata.id": "%s/Chassis/%s" % (PREFIX, h.name)}]},
            "Actions": {"#ComputerSystem.Reset": {
                "target": path + "/Actions/ComputerSystem.Reset",
                "ResetType@Redfish.AllowableValues": RESET_TYPES}},
        }

    def _chassis(self, h, rest):
        """The chassis of ``h`` (``rest`` []), its Power or its Thermal;
        None for any other path."""
        path = "%s/Chassis/%s" % (PREFIX, h.name)
        if rest == []:
            return {"@odata.type": "#Chassis.v1_10_0.Chassis",
                    "@odata.id": path, "Id": h.name, "Name": h.name,
                    "ChassisType": "RackMount",
                    "Status": {"State": "Enabled", "Health": worst(
                        health(h, p) for p in ("power_supply", "fan"))},
                    "Power": {"@odata.id": path + "/Power"},
                    "Thermal": {"@odata.id": path + "/Thermal"}}
        if rest == ["Power"]:
            return {"@odata.type": "#Power.v1_5_0.Power",
                    "@odata.id": path + "/Power", "Id": "Power",
                    "Name": "Power", "PowerSupplies": [
                        part(path + "/Power#/PowerSupplies/%d" % i,
                             str(i), "PS%d" % (i + 1),
                             health(h, "power_supply") if i == 0 else "OK")
                        for i in range(2)]}
        if rest == ["Thermal"]:
            return {"@odata.type": "#Thermal.v1_5_0.Thermal",
                    "@odata.id": path + "/Thermal", "Id": "Thermal",
                    "Name": "Thermal", "Fans": [
                        part(path + "/Thermal#/Fans/%d" % i, str(i),
                             "Fan%d" % (i + 1),
                             health(h, "fan") if i == 0 else "OK")
                        for i in range(2)]}
        return None

    def _memory(self, h, rest):
        path = "%s/Systems/%s/Memory" % (PREFIX, h.name)
        if rest:
            return {"@odata.type": "#Memory.v1_7_0.Memory",
                    "@odata.id": path + "/DIMM_A1", "Id": "DIMM_A1",
                    "Name": "DIMM A1", "CapacityMiB": 262144,
                    "Status": {"State": "Enabled",
                               "Health": health(h, "memory")}}
        return {"@odata.type": "#MemoryCollection.MemoryCollection",
                "@odata.id": path, "Name": "Memory Module Collection",
                "Members@odata.count": 1,
                "Members": [{"@odata.id": path + "/DIMM_A1"}]}

    def _reset(self, h, req):
        try:
            reset = req.json()["ResetType"]
        except (ValueError, KeyError, TypeError):
            return error(400, "PropertyMissing",
                         "The property ResetType is a required property and "
                         "must be included in the request.")
        if reset not in RESET_TYPES:
            return error(400, "PropertyValueNotInList",
                         "The value %s for the property ResetType is not in "
                         "the list of acceptable values." % reset)
        off_requested = reset in ("ForceOff", "GracefulShutdown",
                                  "ForceRestart")
        if off_requested and h.bmc_refuse_power_off:
            return error(500, "InternalError",
                         "The request failed due to an internal service "
                         "error. The BMC refused to power the system off.")
        if reset == "ForceRestart":
            self.cloud.power_cycle(h.name)
        else:
            self.cloud.power(h.name, on=not off_requested)
        return web.Response(204)


#: the parts whose health a simulated BMC reports
PARTS = ("system", "power_supply", "fan", "memory")
_RANK = {"OK": 0, "Warning": 1, "Critical": 2}


def health(h, which):
    return (getattr(h, "hardware_health", None) or {}).get(which, "OK")


def worst(values):
    return max(values, key=lambda v: _RANK.get(v, 0), default="OK")


def part(odata_id, member_id, name, value):
    return {"@odata.id": odata_id, "MemberId": member_id, "Name": name,
            "Status": {"State": "Enabled", "Health": value}}


def web_uuid(seed):
    return str(uuid.uuid5(uuid.NAMESPACE_OID, "instanceha-sim-%s" % seed))
