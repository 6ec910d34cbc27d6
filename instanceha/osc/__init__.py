"""The ``openstack instanceha ...`` commands: an OpenStackClient plugin
(entry points ``openstack.cli.extension`` and ``openstack.instanceha.v1``
in setup.cfg). They reach the operator API with the user's own Keystone
session, at the endpoint the Keystone catalog gives for the service type
``instanceha``. See doc/osc.md."""
