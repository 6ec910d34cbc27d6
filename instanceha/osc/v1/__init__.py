"""Version 1 of the ``openstack instanceha`` commands."""
