"""Real peers for the functional suites, started on free 127.0.0.1 ports.

Each peer lives in its own module (``nova``, ``keystone``, ``redfish``,
``ipmi``, ``stubs``, ``bmclink``) and is a context manager: ``start()`` returns once the peer
answers, ``stop()`` kills every process it started. A peer that does not come
up raises :class:`PeerError` naming the peer and its log file.

Nothing here imports Nova, Keystone or sushy-tools: they run in venvs of
their own that ``tools/realpeers/install.sh`` builds (see :mod:`functional.peers.venvs`).
"""

from functional.peers.errors import PeerError, PeerMissing  # noqa: F401
