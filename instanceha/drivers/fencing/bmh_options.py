"""The bmh driver's inventory options, validated: :class:`BmhOptions`.

Inventory fields (besides ``driver``; any may come from ``defaults``):

``namespace``
    the BareMetalHost's namespace (required).
``name``
    the BareMetalHost's name (default: the compute host's name).
``api_url``
    the Kubernetes API, ``https://host:port``. With it:
    ``ca_file`` (the CA bundle that signed the API's certificate; default:
    the system's) or ``insecure: true`` (no verification; not both), and a
    bearer token from ``password``/``password_file``/``password_env`` (read
    once, like a BMC password) or from ``token_file`` (read before every
    request, so a rotated service-account token is picked up). Plain
    ``http://`` is refused with a token (it would travel in clear); without
    one it serves e.g. ``kubectl proxy`` on loopback.
``kubeconfig``
    a kubeconfig file instead (and ``context``, default: its current
    context); its server, CA and credentials are used; the file is read
    again when it changes.
``in_cluster``
    ``true``: the pod's service account (only when asked; nothing falls
    back to in-cluster paths or to ``~/.kube/config``).
``timeout``
    seconds for one API request (default: ``[fencing] timeout``, at most
    30).

Exactly one of ``api_url``, ``kubeconfig`` and ``in_cluster`` is set.

A BareMetalHost's validated options are a :class:`Settings`, which names
the API in a :class:`Connection` (one API client is kept per Connection).
Every invalid option is a FenceError naming the host and the field.
"""

import dataclasses
import hashlib
import hmac
import os
import urllib.parse

import structlog

from instanceha.drivers.fencing import base

LOG = structlog.get_logger("instanceha.fencing.bmh")

MAX_REQUEST_TIMEOUT = 30.0
_TRUE = ("1", "true", "yes", "on")
_FALSE = ("0", "false", "no", "off")
#: key of the token digests in Connection: random, per process
_DIGEST_KEY = os.urandom(32)


@dataclasses.dataclass(frozen=True)
class Connection:
    """How to reach one Kubernetes API. Holds no secret: an inline token is
    represented by a keyed digest, so that a changed token is a change."""
    api_url: str = None
    ca_file: str = None
    insecure: bool = False
    token_digest: str = None
    token_file: str = None
    kubeconfig: str = None
    kubeconfig_stamp: tuple = None
    context: str = None
    in_cluster: bool = False

    def describe(self):
        if self.kubeconfig:
            return "kubeconfig %s%s" % (self.kubeconfig, " context %s"
                                        % self.context if self.context else "")
        if self.in_cluster:
            return "in-cluster service account"
        return self.api_url


@dataclasses.dataclass(frozen=True)
class Settings:
    """A host's validated options."""
    connection: Connection
    namespace: str
    name: str
    read_timeout: float
    connect_timeout: float

    @property
    def target(self):
        return "BareMetalHost %s/%s" % (self.namespace, self.name)


def _as_bool(value):
    """True, False, or None when ``value`` is neither (unset is False)."""
    if value is None:
        return False
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in _TRUE:
        return True
    if text in _FALSE:
        return False
    return None


class BmhOptions:
    """Mixin: the options of a driver that has ``timeout`` (``[fencing]
    timeout``) and ``name``."""

    def settings(self, bmc):
        """The host's validated options (:class:`Settings`); an invalid one
        is a FenceError naming the host and the field."""
        opts = bmc.options
        namespace = opts.get("namespace")
        if not namespace or not isinstance(namespace, str):
            raise self._option_error(bmc, "namespace", "missing: the "
                                     "BareMetalHost's namespace is required")
        name = opts.get("name", bmc.host)
        if not name or not isinstance(name, str):
            raise self._option_error(bmc, "name", "%r is not a BareMetalHost "
                                     "name" % (name,))
        read_timeout = min(self.timeout, MAX_REQUEST_TIMEOUT)
        if opts.get("timeout") is not None:
            try:
                read_timeout = float(opts["timeout"])
            except (TypeError, ValueError):
                read_timeout = -1
            if not read_timeout > 0:
                raise self._option_error(bmc, "timeout", "%r is not a "
                                         "positive number of seconds"
                                         % (opts["timeout"],))
        return Settings(connection=self._connection(bmc), namespace=namespace,
                        name=name, read_timeout=read_timeout,
                        connect_timeout=min(read_timeout, 10.0))

    def _connection(self, bmc):
        opts = bmc.options
        in_cluster = _as_bool(opts.get("in_cluster", False))
        if in_cluster is None:
            raise self._option_error(bmc, "in_cluster", "%r is not true or "
                                     "false" % (opts.get("in_cluster"),))
        ways = [w for w, on in (("api_url", bool(opts.get("api_url"))),
                                ("kubeconfig", bool(opts.get("kubeconfig"))),
                                ("in_cluster", in_cluster)) if on]
        if not ways:
            raise self._option_error(bmc, "api_url", "no Kubernetes API "
                                     "configured: set api_url, kubeconfig or "
                                     "in_cluster: true")
        if len(ways) > 1:
            raise self._option_error(bmc, ways[1], "set together with %s; "
                                     "choose one way to reach the API"
                                     % ways[0])
        token_file = opts.get("token_file")
        insecure = _as_bool(opts.get("insecure", False))
        if insecure is None:
            raise self._option_error(bmc, "insecure", "%r is not true or "
                                     "false" % (opts.get("insecure"),))
        if ways[0] != "api_url":
            for field in ("ca_file", "token_file", "insecure"):
                if opts.get(field):
                    raise self._option_error(
                        bmc, field, "applies to api_url only; the %s "
                        "brings its own" % ("kubeconfig" if ways[0] ==
                                            "kubeconfig" else
                                            "service account"))
            if bmc.password:
                raise self._option_error(
                    bmc, "password", "a token applies to api_url only; the "
                    "%s brings its own credentials" % ways[0])
        if opts.get("context") and ways[0] != "kubeconfig":
            raise self._option_error(bmc, "context", "applies to kubeconfig "
                                     "only")
        if ways[0] == "in_cluster":
            return Connection(in_cluster=True)
        if ways[0] == "kubeconfig":
            path = opts["kubeconfig"]
            try:
                st = os.stat(path)
            except (OSError, TypeError) as e:
                raise self._option_error(bmc, "kubeconfig", "cannot read %s: "
                                         "%s" % (path, getattr(e, "strerror",
                                                               None) or e))
            context = opts.get("context")
            return Connection(kubeconfig=path,
                              kubeconfig_stamp=(st.st_mtime_ns, st.st_size,
                                                st.st_ino),
                              context=str(context) if context else None)
        url = str(opts["api_url"]).strip().rstrip("/")
        parts = urllib.parse.urlsplit(url)
        if parts.scheme not in ("https", "http") or not parts.hostname:
            raise self._option_error(bmc, "api_url", "%r is not an http(s) "
                                     "URL" % url)
        if bmc.password and token_file:
            raise self._option_error(bmc, "token_file", "set together with a "
                                     "password/token; a token comes from one "
                                     "of them")
        if parts.scheme == "http" and (bmc.password or token_file):
            raise self._option_error(bmc, "api_url", "plain http would send "
                                     "the token in clear; use https")
        ca_file = opts.get("ca_file")
        if ca_file and insecure:
            raise self._option_error(bmc, "insecure", "set together with "
                                     "ca_file; choose one")
        if ca_file and (not isinstance(ca_file, str)
                        or not os.path.isfile(ca_file)):
            raise self._option_error(bmc, "ca_file", "no such file: %s"
                                     % (ca_file,))
        if token_file is not None and (not isinstance(token_file, str)
                                       or not token_file):
            raise self._option_error(bmc, "token_file", "must be a path")
        digest = None
        if bmc.password:
            digest = hmac.new(_DIGEST_KEY, bmc.password.encode(),
                              hashlib.sha256).hexdigest()
        return Connection(api_url=url, ca_file=ca_file or None,
                          insecure=insecure, token_digest=digest,
                          token_file=token_file or None)

    def _option_error(self, bmc, field, reason):
        LOG.error("fence_error", host=bmc.host, driver=self.name,
                  field=field, reason=reason)
        return base.FenceError("host %s: option %s: %s"
                               % (bmc.host, field, reason))
