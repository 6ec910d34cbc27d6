"""The sushy clients the Redfish driver keeps: one per BMC and user.

A :class:`Client` holds one sushy root, its connector and its auth, and
the lock that serialises the requests made through it. :func:`close_client`
forgets them and deletes the client's Redfish session on the BMC;
:func:`close_all` does so for every kept client.
"""

import threading

import structlog
import sushy
from sushy import exceptions as sushy_exc

LOG = structlog.get_logger("instanceha.fencing.redfish")


class Client:
    """One sushy root kept for one BMC and user, and the lock that
    serialises every request made through it."""

    def __init__(self, key):
        self.key = key
        self.lock = threading.RLock()
        self.settings = None
        self.root = None
        self.auth = None
        self.conn = None

    def has_session(self):
        return (isinstance(self.auth, sushy.auth.SessionAuth)
                and self.auth.can_refresh_session())


def close_client(client, host, reason):
    """Forget ``client``'s sushy root; delete its session on the BMC.
    Never raises."""
    with client.lock:
        auth, conn, settings = client.auth, client.conn, client.settings
        had_session = client.has_session()
        client.root = client.auth = client.conn = client.settings = None
        if had_session:
            # Not auth.close(): on a 401 (the session expired) sushy would
            # open a new session to retry the DELETE, and leak that one.
            try:
                conn.delete(auth.get_session_resource_id(),
                            allow_reauth=False)
                outcome = "deleted"
            except sushy_exc.AccessError:
                outcome = "expired already"
            except Exception as e:   # noqa: BLE001 - unreachable BMC, TLS...
                outcome = "not deleted: %s" % type(e).__name__
            finally:
                auth.reset_session_attrs()
            LOG.info("redfish_session_closed", host=host, driver="redfish",
                     bmc=settings.address if settings else None,
                     reason=reason, session=outcome)
        if conn is not None:
            try:
                conn.close()
            except Exception:        # noqa: BLE001
                pass


def close_all(clients, lock, reason):
    # The clients stay registered (empty): a call still under way on one
    # reopens it there, where the next close finds it, instead of leaking.
    with lock:
        items = list(clients.values())
    for client in items:
        close_client(client, host=None, reason=reason)
