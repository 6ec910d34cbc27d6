"""How the Nova driver repairs one server on a healthy host (issue 25):
the sweep's reads (servers by status across projects, a server's
instance actions) and the repair actions (os-start, reboot HARD, rebuild
from the server's image) and the result markers in server metadata.

What Nova does, read in its source (nova/compute/api.py,
api/openstack/compute/servers.py, server_metadata.py,
instance_actions.py):

* ``os-start`` is accepted in vm_state stopped only (409 otherwise);
  ``reboot`` HARD in active, stopped, paused, suspended and error
  (``vm_states.ALLOW_HARD_REBOOT``); ``rebuild`` in active, stopped and
  error. Each answers 202 and records an instance action with the
  caller's user and project.
* ``POST /servers/{id}/metadata`` merges the keys given with the
  server's (``PUT`` would replace them all): values are strings of at
  most 255 characters; ``DELETE /servers/{id}/metadata/{key}`` removes
  one (404 when it is not there).
* ``GET /servers/{id}/os-instance-actions`` lists the actions newest
  first with ``user_id`` and ``project_id`` (null for Nova's own
  context: its power-state sync's stop).
"""

import urllib.parse

from instanceha.drivers.compute import base
from instanceha.drivers.compute.nova_records import parse_time, to_server
from instanceha.drivers.compute.nova_transport import Listing

#: servers of every project in one state
BY_STATUS = Listing("/servers", "servers", (("all_projects", "all_tenants"),
                                            ("status", "status")))
#: Nova's limit on a metadata value
VALUE_MAX = 255


class NovaRepair:
    """One server's repair, read and sent through ``nova`` (the driver's
    :class:`~instanceha.drivers.compute.nova_transport.NovaTransport`)."""

    def __init__(self, nova):
        self._nova = nova

    def list_servers_by_status(self, status):
        bodies = self._nova.list(BY_STATUS, "/servers/detail", "2.53",
                            base_path="/servers/detail", all_projects=True,
                            status=status)
        return [to_server(s) for s in bodies]

    def instance_actions(self, server_id):
        body = self._nova.call("get", "/servers/%s/os-instance-actions"
                          % server_id, "2.58")
        out = []
        for a in body.get("instanceActions") or ():
            out.append(base.InstanceAction(
                action=str(a.get("action") or ""),
                user_id=a.get("user_id"), project_id=a.get("project_id"),
                request_id=a.get("request_id"),
                start_time=parse_time(a.get("start_time"))))
        return out

    def _action(self, server_id, body):
        self._nova.call("post", "/servers/%s/action" % server_id, "2.1",
                   json=body)

    def start_server(self, server_id):
        self._action(server_id, {"os-start": None})

    def reboot_server(self, server_id, hard=True):
        self._action(server_id, {"reboot": {"type": "HARD" if hard
                                            else "SOFT"}})

    def rebuild_server(self, server_id, image_id):
        self._action(server_id, {"rebuild": {"imageRef": str(image_id)}})

    def set_server_metadata(self, server_id, items):
        # Removals first: Nova takes one key per DELETE, and a reader
        # between the requests must never see the new result beside the
        # old 'running' marker (the keys set come last, in one POST).
        for key in [k for k, v in items.items() if v is None]:
            try:
                self._nova.call("delete", "/servers/%s/metadata/%s" % (
                    server_id, urllib.parse.quote(key, safe="")), "2.1")
            except base.NotFound:
                pass                    # gone already
        sets = {k: str(v)[:VALUE_MAX] for k, v in items.items()
                if v is not None}
        if sets:
            self._nova.call("post", "/servers/%s/metadata" % server_id, "2.1",
                       json={"metadata": sets})
