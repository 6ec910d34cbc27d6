"""Booting and deleting servers in the simulated Nova API: ``POST
/servers`` (the subset of Nova's body a smoke test sends, with its
microversion rules: ``networks`` required from 2.37, "auto" / "none"
from 2.37, ``description`` from 2.19) and ``DELETE /servers/{id}``.
The behaviour behind them is model_builds.py's."""

from instanceha.sim.nova_schema import (
    check_keys, check_string, invalid, read_body)
from instanceha.sim.nova_wire import PREFIX, ApiFault

ALLOWED = ["name", "flavorRef", "imageRef", "availability_zone",
           "networks", "metadata", "key_name", "security_groups",
           "adminPass", "user_data", "config_drive"]


def _id_from_ref(ref):
    """Nova takes an id or a link ending with it."""
    return ref.rstrip("/").rsplit("/", 1)[-1]


def parse_zone(value):
    """Nova's ``parse_availability_zone``: "ZONE", "ZONE:HOST",
    "ZONE:HOST:NODE" or "ZONE::NODE" -> (zone or None, forced host or
    None). A node is its host here (one node per host)."""
    if ":" not in value:
        return value or None, None
    parts = value.split(":")
    if len(parts) == 2:
        zone, host = parts
    elif len(parts) == 3:
        zone, host, node = parts
        host = host or node
    else:
        raise ApiFault(400, "Invalid input received: Unable to parse "
                            "availability_zone")
    return zone or None, host or None


def _check_networks(networks, version):
    if version >= (2, 37) and networks in ("auto", "none"):
        return
    if not isinstance(networks, list):
        invalid("networks", networks, "%r is not of type 'array'"
                % (networks,))
    for net in networks:
        if not isinstance(net, dict) or not net \
                or set(net) - {"uuid", "port", "fixed_ip", "tag"}:
            invalid("networks", net, "%r is not a valid network" % (net,))


class BuildsAPI:
    """Mixed into NovaAPI: needs ``self.cloud``."""

    def create_server(self, req, version):
        body = read_body(req)
        if not isinstance(body, dict) or set(body) != {"server"}:
            raise ApiFault(400, "'server' is a required property")
        args = body["server"]
        allowed = list(ALLOWED)
        if version >= (2, 19):
            allowed.append("description")
        required = ["name", "flavorRef"]
        if version >= (2, 37):
            required.append("networks")
        check_keys(args, allowed, required)
        check_string("name", args["name"])
        flavor = args["flavorRef"]
        if not isinstance(flavor, (str, int)) or str(flavor) == "":
            invalid("flavorRef", flavor, "%r is not of type 'string'"
                    % (flavor,))
        image = args.get("imageRef")
        if not image:
            raise ApiFault(400, "Can not find requested image")
        check_string("imageRef", image)
        if "networks" in args:
            _check_networks(args["networks"], version)
        zone, host = None, None
        if args.get("availability_zone") is not None:
            check_string("availability_zone", args["availability_zone"])
            zone, host = parse_zone(args["availability_zone"])
        if host is not None:
            # Nova (bug 1934770): a zone the forced host is not in is
            # replaced by the host's own.
            if host in self.cloud.hosts and \
                    self.cloud.zone_of(host) != zone:
                zone = None
        metadata = args.get("metadata") or {}
        if not isinstance(metadata, dict):
            invalid("metadata", metadata, "%r is not of type 'object'"
                    % (metadata,))
        s = self.cloud.create_server(
            args["name"], _id_from_ref(str(flavor)), _id_from_ref(image),
            zone=zone, host=host, metadata=metadata)
        base = req.base_url + PREFIX
        return 202, {"server": {
            "id": s.id, "OS-DCF:diskConfig": "MANUAL",
            "security_groups": [{"name": "default"}],
            "adminPass": args.get("adminPass") or "sim-%s" % s.id[:8],
            "links": [
                {"rel": "self", "href": "%s/v2.1/servers/%s" % (base, s.id)},
                {"rel": "bookmark",
                 "href": "%s/servers/%s" % (base, s.id)}]}}

    def delete_server(self, server_id):
        self.cloud.delete_server(server_id)
        return 204, None
