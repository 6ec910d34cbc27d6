"""Reaching the tooz backend: its port probed before tooz tries (and
retries for a minute), one attempt per call on a Redis client, and whether
an error says the backend did not answer (worth waiting for) or refused
us for good."""

import socket
import urllib.parse

import structlog

LOG = structlog.get_logger("instanceha.coordination")


class CoordinationError(Exception):
    """The backend could not be reached or joined at start. ``retry``:
    it did not answer (refused, timed out, not resolved, still loading),
    which waiting may cure; False for what it cannot (a wrong password,
    an unknown driver or URL)."""

    def __init__(self, text, retry=False):
        super().__init__(text)
        self.retry = retry


#: Errors (by class name, anywhere in the cause chain) that say the backend
#: refused us for good: waiting does not cure them.
_REFUSED = frozenset({"AuthenticationError",
                      "AuthenticationWrongNumberOfArgsError",
                      "NoMatches", "NoSuchDriver", "NoUniqueMatch"})
#: ... and those that say it did not answer (yet).
_NO_ANSWER = frozenset({"ToozConnectionError", "OperationTimedOut",
                        "ConnectionError", "TimeoutError",
                        "BusyLoadingError", "ConnectionFailedError",
                        "Etcd3Exception"})


def _chain(e):
    seen = []
    while e is not None and len(seen) < 8 and e not in seen:
        seen.append(e)
        e = e.__cause__ or e.__context__
    return seen


def unreachable(e):
    """True when ``e``, raised while reaching the backend, says it does
    not answer (yet): refused or reset connections, timeouts, a name that
    does not resolve (DNS may come back after a site power loss too), a
    Redis still loading its data. False when it answered no (a wrong
    password) or the URL names no driver: a retry cannot cure that."""
    chain = _chain(e)
    for x in chain:
        text = str(x)
        if type(x).__name__ in _REFUSED or "WRONGPASS" in text \
                or "NOAUTH" in text or "invalid password" in text:
            return False
    return any(isinstance(x, (OSError, TimeoutError))
               or type(x).__name__ in _NO_ANSWER for x in chain)


#: Default ports of the URL schemes whose server is probed before tooz
#: tries (and retries for a minute) to reach it.
_PORTS = {"redis": 6379, "rediss": 6379, "etcd3+http": 2379,
          "etcd3+https": 2379, "etcd3": 2379}


def probe(url, timeout):
    """Fail at once (OSError) when the backend's port does not answer."""
    parsed = urllib.parse.urlsplit(url)
    port = parsed.port or _PORTS.get(parsed.scheme)
    if not parsed.hostname or port is None:
        return
    socket.create_connection((parsed.hostname, port), timeout).close()


def fail_fast(coord):
    """tooz's Redis driver retries a refused connection 15 times, and the
    redis client retries each with back-off: a minute in all, longer than
    any lease. One attempt per call is enough here: the loop calls again
    every heartbeat_interval."""
    client = getattr(coord, "_client", None)
    set_retry = getattr(client, "set_retry", None)
    if set_retry is None:
        return
    try:
        # Local: only a Redis client gets here, and redis is that driver's
        # dependency (absent, or without these, the retry is only slower).
        from redis.backoff import NoBackoff
        from redis.retry import Retry
        set_retry(Retry(NoBackoff(), 0))
    except Exception as e:   # noqa: BLE001 - slower, not wrong
        LOG.warning("coordination_retry_unchanged", reason=str(e))
