"""instanceha: instance high availability for OpenStack Nova."""

from instanceha import backend as _backend

# Before any module of ours imports oslo.messaging: threads, no eventlet.
_backend.select()
