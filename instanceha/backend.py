"""Threads, never eventlet.

instanceha runs on native threads: its engine, worker pool, listener and
operator API are threads, and nothing is monkey-patched. Two libraries
under it would still load eventlet: oslo.service picks its eventlet
backend unless told otherwise (oslo.messaging reaches it), and futurist
(under oslo.messaging and tooz) imports eventlet whenever it is
installed, which oslo.service's own requirements make it. Loading it
costs memory, prints eventlet's deprecation warning at every start, and
invites a library to green-thread behind our back.

:func:`select` runs when the ``instanceha`` package is first imported,
before any of its modules can import oslo.messaging: it selects
oslo.service's threading backend and marks eventlet as not importable in
this process (``sys.modules['eventlet'] = None``, which makes ``import
eventlet`` raise ImportError, the answer every library here already
handles as "not installed").
"""

import sys

#: modules that must never be loaded in an instanceha process
BLOCKED = ("eventlet",)


class BackendError(RuntimeError):
    """oslo.service was already set to another backend in this process."""


def select():
    for name in BLOCKED:
        if sys.modules.get(name) is not None:
            # Loaded before instanceha (an embedding program): leave it,
            # but never pick its backend.
            continue
        sys.modules[name] = None
    # Imported here, after the loop above: oslo.service must not find the
    # blocked modules when it first loads.
    from oslo_service import backend
    try:
        backend.init_backend(backend.BackendType.THREADING)
    except backend.exceptions.BackendAlreadySelected as e:
        raise BackendError("oslo.service backend: %s; instanceha needs "
                           "the threading backend" % e)


def loaded():
    """Names of eventlet modules loaded in this process (should be [])."""
    return sorted(name for name, mod in sys.modules.items()
                  if mod is not None and name.split(".")[0] in BLOCKED)
