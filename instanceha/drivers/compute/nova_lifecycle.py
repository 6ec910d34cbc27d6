"""How the Nova driver puts a drained host back or retires it (issue 24):
a smoke test's server booted forced onto the host and deleted, the
host's compute service deleted, the host taken out of an aggregate.

What Nova does, read in its source (api/openstack/compute/servers.py,
services.py, aggregates.py; compute/api.py; scheduler/manager.py,
host_manager.py, request_filter.py, utils.py; compute/manager.py):

* ``POST /servers`` with ``availability_zone`` "ZONE:HOST"
  (compute/api.py ``parse_availability_zone``; admin only, policy
  ``os_compute_api:servers:create:forced_host``) forces the host: the
  API replaces a zone the host is not in by the host's own
  (servers.py ``_validate_host_availability_zone``), and the scheduler
  returns the forced host without running its filters
  (host_manager.py ``get_filtered_hosts``: no ComputeFilter, so neither
  disabled nor down is checked there). Placement is still asked for
  allocation candidates, restricted to the host's resource provider
  (scheduler/utils.py ``resources_from_request_spec``: ``in_tree``), and
  since Train every request carries the mandatory pre-filter
  ``compute_status_filter`` (request_filter.py), which forbids the
  COMPUTE_STATUS_DISABLED trait a disabled compute's provider carries:
  **a boot forced onto a disabled compute fails with NoValidHost**
  (the server ERROR in cell0, no host) unless the trait is missing (a
  compute older than Train, or its sync failed). A host with no room
  fails the same way; an unknown host is NoValidHost "No such host".
  A compute that is down is a candidate all the same: the build is cast
  to it and waits, the server in BUILD, until it starts. A build the
  hypervisor fails is not rescheduled for a forced host (no retry
  information): ERROR with the failure as fault, its host cleared
  (compute/manager.py ``_do_build_and_run_instance``).
  From 2.37 ``networks`` is required: "none" boots without a port.
  The answer (202) carries only the server's id and links.
* ``DELETE /servers/{id}`` (204) is accepted in any state; 404 once gone;
  409 for a locked server.
* ``DELETE /os-services/{id}`` (2.53: the id is the service's UUID, else
  400 "Invalid uuid"; 204) of a nova-compute refuses with 409 while
  instances are on the host ("Unable to delete compute service that is
  hosting instances. Migrate or delete the instances first.") and while
  migrations from or to it are not over (any status but confirmed,
  reverted, error, failed, completed, cancelled, done: "... that has
  in-progress migrations. ..."); 404 "Service ... not found.". It then
  removes the host from every aggregate itself, deletes its resource
  provider and host mapping.
* ``POST /os-aggregates/{id}/action`` ``remove_host``: 404 "Cannot remove
  host H in aggregate A" whether the aggregate, the host or the
  membership is missing; 409 when Nova refuses the change (an
  InvalidAggregateAction, a Placement conflict); 400 for an id that is
  not an integer. Answers the aggregate.

As in nova_moves.py, Nova's 400 is raised as a plain ComputeError with
status 400 (the transport raises Conflict for 400 and 409), so that a
Conflict always means Nova refused the state of things.
"""

import structlog

from instanceha.drivers.compute import base
from instanceha.drivers.compute.nova_transport import plain_400

LOG = structlog.get_logger("instanceha.nova")

CREATE_MICROVERSION = "2.37"        # networks "none"
SERVICES_MICROVERSION = "2.53"      # services by UUID
AGGREGATES_MICROVERSION = "2.41"    # the aggregate's uuid in the answer
DEFAULT_ZONE = "nova"               # Nova's default_availability_zone


def forced_zone(zone, host):
    """Nova's availability zone form that forces ``host``: "ZONE:HOST"."""
    for name, value in (("zone", zone), ("host", host)):
        if not isinstance(value, str) or not value or ":" in value:
            raise ValueError("%s must be a name without ':', not %r"
                             % (name, value))
    return "%s:%s" % (zone, host)


class NovaLifecycle:
    """Servers booted and deleted, services deleted, aggregate membership,
    sent through ``nova`` (the driver's
    :class:`~instanceha.drivers.compute.nova_transport.NovaTransport`);
    each change to an aggregate invalidates the driver's ``cache`` of
    them (a TTLCache)."""

    def __init__(self, nova, cache):
        self._nova = nova
        self._cache = cache

    def _refusal(self, method, path, microversion, **kwargs):
        return plain_400(self._nova.call, method, path, microversion,
                         **kwargs)

    def create_server(self, name, flavor_id, image_id, host, zone=None,
                      network=None):
        server = {"name": name, "flavorRef": str(flavor_id),
                  "imageRef": str(image_id),
                  "availability_zone": forced_zone(zone or DEFAULT_ZONE,
                                                   host),
                  "networks": "none" if network is None
                  else [{"uuid": str(network)}]}
        body = self._refusal("post", "/servers", CREATE_MICROVERSION,
                             json={"server": server})
        try:
            sid = body["server"]["id"]
        except (KeyError, TypeError):
            raise base.ComputeError("POST /servers: answer lacks the "
                                    "server's id")
        LOG.info("server_created", server=sid, host=host, name=name)
        # Nova's answer holds the id and links only: the server is being
        # built (BUILD) and has no host yet.
        return base.Server(id=str(sid), name=name, status="BUILD",
                           host=None, vm_state="building",
                           raw=dict(body["server"]))

    def delete_server(self, server_id):
        try:
            self._refusal("delete", "/servers/%s" % server_id, "2.1")
        except base.NotFound:
            pass                        # gone already: what was wanted

    def delete_service(self, service_id):
        self._refusal("delete", "/os-services/%s" % service_id,
                      SERVICES_MICROVERSION)
        # Nova removed the host from its aggregates.
        self._cache.invalidate("aggregates")

    def remove_host_from_aggregate(self, aggregate_id, host):
        path = "/os-aggregates/%s/action" % aggregate_id
        try:
            self._refusal("post", path, AGGREGATES_MICROVERSION,
                          json={"remove_host": {"host": host}})
        except base.NotFound as e:
            raise base.NotFound(
                "%s (the aggregate or the host is unknown, or the host is "
                "not in it)" % e, 404) from None
        finally:
            # Our own write: the next read must see it (even after an
            # error, which may have been applied).
            self._cache.invalidate("aggregates")
