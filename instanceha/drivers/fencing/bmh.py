"""Metal3 BareMetalHost fencing through the Kubernetes API — the only module
that imports the ``kubernetes`` client.

A compute host provisioned by Metal3 is powered through its BareMetalHost
object (``metal3.io/v1alpha1``, ``baremetalhosts``, namespaced): the
baremetal-operator makes the machine's power follow the object, and reports
the actual power in ``status.poweredOn``.

``power_off``

1. reads the object; ``status.poweredOn: false`` already is success, and
   nothing is patched;
2. patches (a JSON merge patch) ``spec.online: false`` together with the
   annotation ``reboot.metal3.io/instanceha: {"mode":"hard"}``. The
   annotation makes the power-off a hard one (no soft shutdown first) and,
   being a phased reboot annotation (``reboot.metal3.io/<key>``), keeps the
   host off until it is removed; ``spec.online: false`` says off is the
   wanted state. A 409 Conflict is retried;
3. reads the object every ``[fencing] poll_interval`` until
   ``status.poweredOn`` is false, for at most ``[fencing] timeout``
   seconds; then a FenceError names the host and the last state seen
   (poweredOn, provisioning state, operational status and error message).

``power_state`` reads ``status.poweredOn`` (missing: unknown).
``power_on`` removes the annotation and sets ``spec.online: true``.

Inventory fields: see :mod:`instanceha.drivers.fencing.bmh_options`.

Failures: 401/403 are refused credentials (not retried); 404 names the
missing BareMetalHost (namespace/name); 409 to the patch is retried; 429,
5xx and failures to connect are retried ``[fencing] retries`` times
(``[fencing] poll_interval`` apart) and then fail. Every failure is a
:class:`FenceError` naming the host and the reason, never the token.
"""

import json
import threading
import time

import kubernetes.client as k8s_client
import kubernetes.config as k8s_config
from kubernetes.client.rest import ApiException
import structlog
import tenacity
import urllib3

from instanceha.drivers.fencing import base
from instanceha.drivers.fencing.bmh_options import BmhOptions
from instanceha.log import mask_known

LOG = structlog.get_logger("instanceha.fencing.bmh")

GROUP = "metal3.io"
VERSION = "v1alpha1"
PLURAL = "baremetalhosts"
#: our phased reboot annotation: holds the host off until we remove it
ANNOTATION = "reboot.metal3.io/instanceha"
HARD = json.dumps({"mode": "hard"}, separators=(",", ":"))
#: answers worth another attempt
_RETRY_STATUSES = (429, 500, 502, 503, 504)


class _Transient(Exception):
    """The API could not be reached, or answered 'try again' (``status``
    is then the HTTP status)."""

    def __init__(self, reason, status=None):
        super().__init__(reason)
        self.status = status


class _Conflict(_Transient):
    """409 to a patch: the object changed under us; patch again."""


class _Client:
    """One API client for one Connection."""

    def __init__(self, api, configuration, url):
        self.api = api
        self.configuration = configuration
        self.url = url


def _read_token(path):
    with open(path, encoding="utf-8") as f:
        return f.read().strip()


class BareMetalHostDriver(BmhOptions, base.FencingDriver):
    name = "bmh"

    def __init__(self, conf, sleep=None, clock=None):
        self.timeout = float(conf.fencing.timeout)
        self.poll_interval = float(conf.fencing.poll_interval)
        self.retries = int(conf.fencing.retries)
        # Injectable so unit tests drive polls and retries without sleeping.
        self._sleep = sleep or time.sleep
        self._clock = clock or time.monotonic
        self._clients = {}
        self._lock = threading.Lock()

    # -- FencingDriver -------------------------------------------------------

    def power_state(self, bmc):
        settings = self.settings(bmc)
        client = self._client(bmc, settings)
        return _power(self._get(bmc, settings, client, "read power state"))

    def power_off(self, bmc):
        settings = self.settings(bmc)
        client = self._client(bmc, settings)
        obj = self._get(bmc, settings, client, "read power state")
        if _power(obj) is base.PowerState.OFF:
            LOG.info("fence_already_off", host=bmc.host, driver=self.name,
                     bmh=_ref(settings),
                     online=(obj.get("spec") or {}).get("online"))
            return
        body = {"metadata": {"annotations": {ANNOTATION: HARD}},
                "spec": {"online": False}}
        self._patch(bmc, settings, client, "request power off", body)
        LOG.info("fence_power_off_requested", host=bmc.host, driver=self.name,
                 bmh=_ref(settings), annotation=ANNOTATION, mode="hard",
                 state=_describe(obj))
        last = self._wait_off(bmc, settings, client)
        if _power(last) is not base.PowerState.OFF:
            LOG.error("fence_timeout", host=bmc.host, driver=self.name,
                      bmh=_ref(settings), timeout=self.timeout,
                      state=_describe(last))
            raise base.FenceError(
                "host %s: %s still reports %s %gs after the hard power-off "
                "request" % (bmc.host, settings.target, _describe(last),
                             self.timeout))
        LOG.info("fence_confirmed_off", host=bmc.host, driver=self.name,
                 bmh=_ref(settings))

    def power_on(self, bmc):
        settings = self.settings(bmc)
        client = self._client(bmc, settings)
        body = {"metadata": {"annotations": {ANNOTATION: None}},
                "spec": {"online": True}}
        self._patch(bmc, settings, client, "request power on", body)
        LOG.info("power_on_sent", host=bmc.host, driver=self.name,
                 bmh=_ref(settings), annotation_removed=ANNOTATION)

    def close(self):
        """Close every API client's connections."""
        with self._lock:
            clients = list(self._clients.values())
            self._clients.clear()
        for client in clients:
            _close(client)

    # -- clients -------------------------------------------------------------

    def _client(self, bmc, settings):
        conn = settings.connection
        with self._lock:
            client = self._clients.get(conn)
            if client is not None:
                return client
            stale = [c for k, c in self._clients.items()
                     if k.kubeconfig and k.kubeconfig == conn.kubeconfig
                     and k.context == conn.context]
        for old in stale:            # the kubeconfig file changed
            _close(old)
        client = self._make_client(bmc, conn)
        with self._lock:
            for key in [k for k, c in self._clients.items() if c in stale]:
                del self._clients[key]
            return self._clients.setdefault(conn, client)

    def _make_client(self, bmc, conn):
        configuration = k8s_client.Configuration()
        try:
            if conn.kubeconfig:
                k8s_config.load_kube_config(
                    config_file=conn.kubeconfig, context=conn.context,
                    client_configuration=configuration, persist_config=False)
            elif conn.in_cluster:
                k8s_config.load_incluster_config(
                    client_configuration=configuration)
        except (k8s_config.ConfigException, OSError, ValueError, TypeError,
                KeyError) as e:
            field = "kubeconfig" if conn.kubeconfig else "in_cluster"
            raise self._option_error(bmc, field, "cannot load %s: %s" % (
                conn.describe(), _scrub(str(e), _secrets(bmc, configuration))))
        if conn.api_url:
            configuration.host = conn.api_url
            configuration.verify_ssl = not conn.insecure
            configuration.ssl_ca_cert = conn.ca_file
            if bmc.password:
                configuration.api_key = {"authorization": bmc.password}
                configuration.api_key_prefix = {"authorization": "Bearer"}
            if conn.insecure:
                LOG.warning("tls_verification_disabled", host=bmc.host,
                            driver=self.name, api=conn.api_url)
        # One attempt per call, errors raised as they are: retries are ours.
        configuration.retries = False
        api_client = k8s_client.ApiClient(configuration)
        api_client.user_agent = "instanceha-fencing-bmh"
        LOG.info("kubernetes_client_created", host=bmc.host, driver=self.name,
                 api=configuration.host, via=conn.describe())
        return _Client(k8s_client.CustomObjectsApi(api_client), configuration,
                       configuration.host)

    # -- requests ------------------------------------------------------------

    def _get(self, bmc, settings, client, what):
        return self._call(bmc, settings, client, what, lambda: (
            client.api.get_namespaced_custom_object(
                GROUP, VERSION, settings.namespace, PLURAL, settings.name,
                _request_timeout=(settings.connect_timeout,
                                  settings.read_timeout))))

    def _patch(self, bmc, settings, client, what, body):
        return self._call(bmc, settings, client, what, lambda: (
            client.api.patch_namespaced_custom_object(
                GROUP, VERSION, settings.namespace, PLURAL, settings.name,
                body,
                _request_timeout=(settings.connect_timeout,
                                  settings.read_timeout))), patch=True)

    def _wait_off(self, bmc, settings, client):
        """The object once it reports poweredOn false, or the last one read
        when ``timeout`` is over."""
        start = self._clock()
        retrying = tenacity.Retrying(
            retry=tenacity.retry_if_result(
                lambda obj: _power(obj) is not base.PowerState.OFF),
            stop=lambda rs: self._clock() - start >= self.timeout,
            wait=tenacity.wait_fixed(self.poll_interval),
            sleep=self._sleep,
            retry_error_callback=lambda rs: rs.outcome.result())
        return retrying(self._get, bmc, settings, client, "poll power state")

    def _call(self, bmc, settings, client, what, func, patch=False):
        """Run one API request; retry failures to connect, 429/5xx and (for
        a patch) 409; translate every library error into FenceError."""
        secrets = _secrets(bmc, client.configuration)

        def attempt():
            if settings.connection.token_file:
                self._load_token_file(bmc, settings, client)
                secrets[:] = _secrets(bmc, client.configuration)
            try:
                return func()
            except ApiException as e:
                if e.status == 409 and patch:
                    raise _Conflict(_api_reason(e, secrets), 409) from e
                if e.status in _RETRY_STATUSES:
                    raise _Transient(_api_reason(e, secrets), e.status) from e
                raise
            except urllib3.exceptions.SSLError:
                raise
            except urllib3.exceptions.MaxRetryError as e:
                if isinstance(e.reason, urllib3.exceptions.SSLError):
                    raise e.reason from e
                raise _Transient(_scrub(str(e.reason or e), secrets)) from e
            except (urllib3.exceptions.HTTPError, OSError) as e:
                raise _Transient(_scrub("%s: %s" % (type(e).__name__, e),
                                        secrets)) from e

        try:
            return base.retrying(attempt, _Transient, self.retries,
                                 self.poll_interval, self._sleep, dict(
                                     log=LOG, host=bmc.host, driver=self.name,
                                     action=what, bmh=_ref(settings)))
        except _Conflict as e:
            raise self._fail(bmc, settings, what, "the object kept changing "
                             "(HTTP 409 Conflict) after %d attempts: %s"
                             % (self.retries, e))
        except _Transient as e:
            if e.status is not None:
                raise self._fail(bmc, settings, what, "Kubernetes API %s "
                                 "still answered HTTP %s after %d attempts: "
                                 "%s" % (client.url, e.status, self.retries,
                                         e))
            raise self._fail(bmc, settings, what, "Kubernetes API %s "
                             "unreachable after %d attempts: %s"
                             % (client.url, self.retries, e),
                             base.BmcUnreachable)
        except urllib3.exceptions.SSLError as e:
            raise self._fail(bmc, settings, what, "TLS with the Kubernetes "
                             "API %s failed (options ca_file, insecure, or "
                             "the kubeconfig's CA): %s"
                             % (client.url, _scrub(str(e), secrets)))
        except ApiException as e:
            reason = _api_reason(e, secrets)
            if e.status == 0:
                # the client's wrapper for TLS failures and bad requests
                if "SSL" in reason:
                    reason = ("TLS with the Kubernetes API %s failed "
                              "(options ca_file, insecure, or the "
                              "kubeconfig's CA): %s" % (client.url, reason))
                raise self._fail(bmc, settings, what, reason)
            if e.status in (401, 403):
                raise self._fail(bmc, settings, what, "Kubernetes API %s "
                                 "refused the credentials (HTTP %s: %s)"
                                 % (client.url, e.status, reason))
            if e.status == 404:
                raise self._fail(bmc, settings, what, "no such "
                                 "BareMetalHost %s (HTTP 404: %s)"
                                 % (_ref(settings), reason))
            raise self._fail(bmc, settings, what, "Kubernetes API %s refused "
                             "the request (HTTP %s: %s)"
                             % (client.url, e.status, reason))
        except base.FenceError:
            raise
        except (k8s_client.exceptions.OpenApiException, ValueError,
                TypeError) as e:
            raise self._fail(bmc, settings, what, "Kubernetes client error: "
                             "%s: %s" % (type(e).__name__,
                                         _scrub(str(e), secrets)))

    def _load_token_file(self, bmc, settings, client):
        path = settings.connection.token_file
        try:
            token = _read_token(path)
        except (OSError, UnicodeDecodeError) as e:
            raise self._option_error(bmc, "token_file", "cannot read %s: %s"
                                     % (path, getattr(e, "strerror", None)
                                        or type(e).__name__))
        if not token:
            raise self._option_error(bmc, "token_file", "%s is empty" % path)
        configuration = client.configuration
        configuration.api_key = {"authorization": token}
        configuration.api_key_prefix = {"authorization": "Bearer"}

    def _fail(self, bmc, settings, what, reason, kind=base.FenceError):
        LOG.error("fence_error", host=bmc.host, driver=self.name,
                  action=what, bmh=_ref(settings), reason=reason)
        return kind("host %s: cannot %s of %s: %s"
                    % (bmc.host, what, settings.target, reason))


# -- helpers -----------------------------------------------------------------

def _ref(settings):
    return "%s/%s" % (settings.namespace, settings.name)


def _power(obj):
    value = ((obj or {}).get("status") or {}).get("poweredOn")
    if value is True:
        return base.PowerState.ON
    if value is False:
        return base.PowerState.OFF
    return base.PowerState.UNKNOWN


def _describe(obj):
    """The object's power-related state in one phrase, for errors and
    logs: ``poweredOn true (spec.online false, provisioning state
    provisioned, operational status error: <message>)``."""
    status = (obj or {}).get("status") or {}
    spec = (obj or {}).get("spec") or {}
    value = status.get("poweredOn")
    words = ["poweredOn %s" % (json.dumps(value) if value is not None
                               else "unset")]
    more = ["spec.online %s" % json.dumps(spec.get("online"))]
    provisioning = (status.get("provisioning") or {}).get("state")
    if provisioning:
        more.append("provisioning state %s" % provisioning)
    operational = status.get("operationalStatus")
    if operational:
        text = "operational status %s" % operational
        if status.get("errorMessage"):
            text += ": %s" % str(status["errorMessage"])[:200]
        more.append(text)
    return "%s (%s)" % (words[0], ", ".join(more))


def _secrets(bmc, configuration):
    """Every token the request may carry, to keep out of messages."""
    found = [bmc.password] if bmc.password else []
    for value in (getattr(configuration, "api_key", None) or {}).values():
        if value:
            value = str(value)
            found.append(value)
            if value.lower().startswith("bearer "):
                found.append(value[len("bearer "):].strip())
    return sorted(set(found), key=len, reverse=True)


def _scrub(text, secrets):
    return mask_known(text, secrets)[:400]


def _api_reason(exc, secrets):
    """The message of the API's Status object, else the HTTP reason."""
    text = None
    body = getattr(exc, "body", None)
    if body:
        try:
            text = json.loads(body).get("message")
        except (ValueError, AttributeError):
            text = str(body)[:200]
    if not text:
        text = str(exc.reason or "no reason given").strip()
    return _scrub(" ".join(str(text).split()), secrets)


def _close(client):
    api_client = client.api.api_client
    try:
        api_client.close()
    except Exception:            # noqa: BLE001 - best effort
        pass
