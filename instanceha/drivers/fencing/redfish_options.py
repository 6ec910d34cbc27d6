"""The Redfish driver's inventory options, validated: :class:`RedfishOptions`.

Per host (an inventory.BMC): ``address`` is the BMC URL, ``username`` and
``password`` its credentials. ``options`` may hold:

``system_id``
    the system's path (default: the only system in the Systems collection;
    a BMC listing several is an error that lists their ids).
``verify``
    TLS: true (default), false, or a CA bundle path.
``auth``
    ``basic`` (default: HTTP basic auth on every request), ``session`` (a
    Redfish session from the BMC's SessionService; the X-Auth-Token is used
    until it expires, then a new session is opened once) or ``auto``
    (a session when the BMC offers one, basic auth otherwise).
``cert_file``, ``key_file``
    a TLS client certificate (and its key, unless ``cert_file`` holds both)
    for BMCs that authenticate clients by certificate.
``reset_type``
    the ComputerSystem.Reset type sent to power the system off: ``ForceOff``
    (default), ``GracefulShutdown`` or ``PushPowerButton``.
``timeout``
    seconds for one HTTP request (default: ``[fencing] timeout``, at most 30).

A host's validated options are a :class:`Settings`: a kept client is
remade when they change. Every invalid option is a FenceError naming the
host and the field.
"""

import dataclasses
import hashlib
import hmac
import os
import urllib.parse

import requests
import structlog
import sushy

from instanceha.drivers.fencing import base

LOG = structlog.get_logger("instanceha.fencing.redfish")

_TRUE = ("1", "true", "yes", "on")
_FALSE = ("0", "false", "no", "off")

AUTH_MODES = ("basic", "session", "auto")
DEFAULT_RESET_TYPE = "ForceOff"
#: reset types that leave a running system powered off; the others (On,
#: restarts, Nmi, Pause...) would never prove it dead
OFF_RESET_TYPES = tuple(t.value for t in (sushy.ResetType.FORCE_OFF,
                                          sushy.ResetType.GRACEFUL_SHUTDOWN,
                                          sushy.ResetType.PUSH_POWER_BUTTON))
MAX_REQUEST_TIMEOUT = 30.0
#: key of the password digests in Settings: random, per process
_DIGEST_KEY = os.urandom(32)


@dataclasses.dataclass(frozen=True)
class Settings:
    """A host's validated Redfish options. Holds no secret: the password
    is represented by a keyed digest (the key lives in this process only),
    so that a changed password is a change."""
    address: str
    username: str
    password_digest: str
    auth: str
    verify: object
    cert: object
    reset_type: str
    read_timeout: float
    connect_timeout: float


def endpoint(address):
    """(scheme, host, port) of a BMC URL, however it is spelt (case,
    trailing slash, default port)."""
    parts = urllib.parse.urlsplit(address.strip())
    scheme = parts.scheme.lower()
    try:
        port = parts.port
    except ValueError:
        port = None
    return (scheme, (parts.hostname or "").lower(),
            port or {"https": 443, "http": 80}.get(scheme))


def base_url(address):
    """The BMC URL spelt one way: scheme://host:port, lower case, no
    trailing slash (an address sushy cannot use is left as written)."""
    scheme, host, port = endpoint(address)
    parts = urllib.parse.urlsplit(address.strip())
    try:
        parts.port
    except ValueError:
        return address
    if not scheme or not host or port is None:
        return address
    if ":" in host:
        host = "[%s]" % host
    path = parts.path.rstrip("/")
    return "%s://%s:%d%s" % (scheme, host, port, path)


class RedfishOptions:
    """Mixin: the options of a driver that has ``timeout`` (``[fencing]
    timeout``) and ``name``."""

    def settings(self, bmc):
        """The host's validated options (:class:`Settings`); an invalid one
        is a FenceError naming the host and the field."""
        auth = str(bmc.options.get("auth", "basic")).strip().lower()
        if auth not in AUTH_MODES:
            raise self._option_error(bmc, "auth", "%r is not one of %s"
                                     % (bmc.options.get("auth"),
                                        ", ".join(AUTH_MODES)))
        read_timeout = min(self.timeout, MAX_REQUEST_TIMEOUT)
        if bmc.options.get("timeout") is not None:
            try:
                read_timeout = float(bmc.options["timeout"])
            except (TypeError, ValueError):
                read_timeout = -1
            if not read_timeout > 0:
                raise self._option_error(bmc, "timeout", "%r is not a "
                                         "positive number of seconds"
                                         % (bmc.options["timeout"],))
        return Settings(
            address=base_url(bmc.address), username=bmc.username,
            password_digest=hmac.new(_DIGEST_KEY, (bmc.password or "")
                                     .encode(), hashlib.sha256).hexdigest(),
            auth=auth, verify=self._verify(bmc), cert=self._cert(bmc),
            reset_type=self._reset_type(bmc), read_timeout=read_timeout,
            connect_timeout=min(read_timeout, 10.0))

    def _option_error(self, bmc, field, reason):
        LOG.error("fence_error", host=bmc.host, driver=self.name,
                  field=field, reason=reason)
        return base.FenceError("host %s: option %s: %s"
                               % (bmc.host, field, reason))

    def _reset_type(self, bmc):
        value = bmc.options.get("reset_type", DEFAULT_RESET_TYPE)
        known = {t.value.lower(): t.value for t in sushy.ResetType}
        canonical = known.get(str(value).strip().lower())
        if canonical is None:
            raise self._option_error(bmc, "reset_type", "%r is not a Redfish "
                                     "reset type (known: %s)"
                                     % (value, ", ".join(sorted(
                                         known.values()))))
        if canonical not in OFF_RESET_TYPES:
            raise self._option_error(bmc, "reset_type", "%s does not power "
                                     "the system off (use one of %s)"
                                     % (canonical, ", ".join(OFF_RESET_TYPES)))
        return canonical

    def _cert(self, bmc):
        """``cert=`` for requests: None, a path, or (cert, key)."""
        cert = bmc.options.get("cert_file")
        key = bmc.options.get("key_file")
        if key and not cert:
            raise self._option_error(bmc, "key_file", "set without cert_file")
        if not cert:
            return None
        for field, path in (("cert_file", cert), ("key_file", key)):
            if path is None:
                continue
            if not isinstance(path, str) or not os.path.isfile(path):
                raise self._option_error(bmc, field, "no such file: %s"
                                         % (path,))
        return (cert, key) if key else cert

    def _verify(self, bmc):
        """The TLS verify value for requests.

        ``True`` becomes the default CA bundle path explicitly: requests
        replaces a plain ``True`` with $REQUESTS_CA_BUNDLE, and the
        inventory's setting must win over the environment.
        """
        value = bmc.options.get("verify", True)
        if isinstance(value, str):
            if value.strip().lower() in _TRUE:
                value = True
            elif value.strip().lower() in _FALSE:
                value = False
        if value is True:
            return requests.certs.where()
        if value is False:
            return False
        if isinstance(value, str) and value:
            return value
        raise base.FenceError("host %s: option verify must be true, false or "
                              "a CA bundle path" % bmc.host)
