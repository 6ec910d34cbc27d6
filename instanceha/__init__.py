"""instanceha: instance high availability for OpenStack Nova."""
