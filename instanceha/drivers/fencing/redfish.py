"""Redfish fencing through sushy — with redfish_options.py and
redfish_clients.py, the only modules that import sushy.

Per host (an inventory.BMC): ``address`` is the BMC URL, ``username`` and
``password`` its credentials; the options an entry may hold are described
in :mod:`instanceha.drivers.fencing.redfish_options`.

``power_off`` sends the reset unless the BMC already says Off, then polls
PowerState every ``[fencing] poll_interval`` until Off or ``[fencing]
timeout``. A BMC answering 409 or 400 to the reset is asked again for the
power state: Off is success (it was off already), anything else a refusal.
Requests that fail to connect are retried ``[fencing] retries`` times; a
BMC that answers with an error is not retried (it refused). Every failure
becomes :class:`FenceError` naming the host and the reason, never the
password.

One sushy client is kept per BMC (address and user) and reused by every
call, so a Redfish session is opened once, not per request. Calls through
one client are serialised (fencing runs on a worker pool). A client is
discarded, and its session deleted on the BMC, when the BMC refuses its
credentials, when the host's settings change, and on :meth:`close` (also run
when the driver is garbage collected or the process exits).
"""

import math
import threading
import time
import weakref

import requests
import structlog
import sushy
from sushy import connector as sushy_connector
from sushy import exceptions as sushy_exc
import tenacity

from instanceha.drivers.fencing import base
from instanceha.drivers.fencing import health as health_mod
from instanceha.drivers.fencing.redfish_clients import (
    Client, close_all, close_client)
from instanceha.drivers.fencing.redfish_options import (
    RedfishOptions, endpoint)
from instanceha.log import mask_known

LOG = structlog.get_logger("instanceha.fencing.redfish")

_AUTH_CLASSES = {
    "basic": sushy.auth.BasicAuth,
    "session": sushy.auth.SessionAuth,
    "auto": sushy.auth.SessionOrBasicAuth,
}
#: answers to a reset that may only mean "it is off already"
_ALREADY_OFF_STATUSES = (400, 409)


class _Transient(Exception):
    """A request that did not reach the BMC; worth another attempt."""


class _Rejected(Exception):
    """The BMC answered a tolerated error status (see ``_call``)."""

    def __init__(self, status, reason):
        super().__init__(reason)
        self.status = status


def _is_tls_error(exc):
    seen = set()
    while exc is not None and id(exc) not in seen:
        if isinstance(exc, requests.exceptions.SSLError):
            return True
        seen.add(id(exc))
        exc = exc.__cause__ or exc.__context__
    return False


class RedfishDriver(RedfishOptions, base.FencingDriver):
    name = "redfish"

    def __init__(self, conf, sleep=None):
        self.timeout = float(conf.fencing.timeout)
        self.poll_interval = float(conf.fencing.poll_interval)
        self.retries = int(conf.fencing.retries)
        # Injectable so unit tests drive polls and retries without sleeping.
        self._sleep = sleep or time.sleep
        self._clients = {}
        self._clients_lock = threading.Lock()
        # Sessions are deleted on the BMCs when the driver goes away, at the
        # latest when the process exits.
        self._finalizer = weakref.finalize(self, close_all, self._clients,
                                           self._clients_lock,
                                           "driver discarded")

    # -- FencingDriver -------------------------------------------------------

    def power_state(self, bmc):
        settings = self.settings(bmc)
        client = self._client(bmc)
        system = self._system(bmc, client, settings)
        return self._state(bmc, client, system, "read power state")

    def system_identity(self, bmc):
        settings = self.settings(bmc)
        client = self._client(bmc)
        return _identity(self._system(bmc, client, settings))

    def read_machine(self, bmc):
        # One read of the system answers both (the default reads it twice).
        settings = self.settings(bmc)
        client = self._client(bmc)
        system = self._system(bmc, client, settings)
        state = self._state(bmc, client, system, "read power state")
        return state, _identity(system)

    def health(self, bmc):
        """The hardware health of the system, its chassis, power
        supplies, fans and memory (:mod:`instanceha.drivers.fencing.health`): the
        System's Status (Health and HealthRollup), each power supply of
        its chassis (Power or PowerSubsystem), each fan (Thermal or
        ThermalSubsystem), and its memory (MemorySummary; each module
        read only when the summary is not OK, to name it). None when no
        resource read reports a health."""
        settings = self.settings(bmc)
        client = self._client(bmc)
        system = self._system(bmc, client, settings)
        body = self._call(bmc, "read system health", lambda: system.json,
                          client) or {}

        def get(path):
            return self._call(
                bmc, "read %s" % path,
                lambda: system._conn.get(path).json(), client)

        return health_mod.redfish_health(body, _parts(body, get))

    def power_off(self, bmc):
        settings = self.settings(bmc)
        reset = settings.reset_type
        client = self._client(bmc)
        system = self._system(bmc, client, settings)
        state = self._state(bmc, client, system, "read power state")
        if state == base.PowerState.OFF:
            LOG.info("fence_already_off", host=bmc.host, driver=self.name)
            return
        what = "send %s" % reset
        try:
            self._call(bmc, what,
                       lambda: system.reset_system(sushy.ResetType(reset)),
                       client, tolerate=_ALREADY_OFF_STATUSES)
        except _Rejected as e:
            # Some BMCs answer a power-off of a system that is already off
            # (here: went off since we read it) with 409 or 400.
            state = self._state(bmc, client, system,
                                "re-read power state after HTTP %s"
                                % e.status, refresh=True)
            if state == base.PowerState.OFF:
                LOG.info("fence_already_off", host=bmc.host,
                         driver=self.name, reset=reset, answer=e.status)
                return
            raise self._fail(bmc, what, "BMC refused the request (HTTP %s: "
                             "%s) and reports power %s"
                             % (e.status, e, state.value))
        LOG.info("fence_reset_sent", host=bmc.host, driver=self.name,
                 reset=reset, state=state.value)
        state = self._wait_off(bmc, client, system)
        if state != base.PowerState.OFF:
            LOG.error("fence_timeout", host=bmc.host, driver=self.name,
                      timeout=self.timeout, state=state.value)
            raise base.FenceError(
                "host %s: BMC did not report power Off within %gs after "
                "%s (last state: %s)" % (bmc.host, self.timeout, reset,
                                         state.value))
        LOG.info("fence_confirmed_off", host=bmc.host, driver=self.name)

    def power_on(self, bmc):
        settings = self.settings(bmc)
        client = self._client(bmc)
        system = self._system(bmc, client, settings)
        state = self._state(bmc, client, system, "read power state")
        if state == base.PowerState.ON:
            LOG.info("power_on_skipped", host=bmc.host, driver=self.name,
                     reason="already on")
            return
        self._call(bmc, "send On",
                   lambda: system.reset_system(sushy.ResetType.ON), client)
        LOG.info("power_on_sent", host=bmc.host, driver=self.name)

    def close(self):
        """Forget every kept client and delete its session on its BMC."""
        close_all(self._clients, self._clients_lock, "driver closed")

    # -- kept clients --------------------------------------------------------

    def _client(self, bmc):
        key = (endpoint(bmc.address), bmc.username)
        with self._clients_lock:
            client = self._clients.get(key)
            if client is None:
                client = self._clients[key] = Client(key)
            return client

    def _root(self, bmc, client, settings):
        """The client's sushy root, made (and a session opened) on first
        use or when the host's settings changed. Called under client.lock."""
        if client.root is not None and client.settings == settings:
            return client.root
        if client.root is not None:
            close_client(client, bmc.host, "settings changed")
        conn = sushy_connector.Connector(
            settings.address, verify=settings.verify,
            # One attempt per call: retries are ours.
            server_side_retries=1,
            server_side_retries_delay=self.poll_interval,
            default_request_timeout=settings.read_timeout,
            connect_timeout=settings.connect_timeout)
        if settings.cert is not None:
            conn._session.cert = settings.cert
        auth = _AUTH_CLASSES[settings.auth](username=bmc.username,
                                            password=bmc.password)
        try:
            root = sushy.Sushy(settings.address, auth=auth, connector=conn)
        except BaseException:
            conn.close()
            raise
        client.root, client.auth, client.conn = root, auth, conn
        client.settings = settings
        if client.has_session():
            LOG.info("redfish_session_opened", host=bmc.host,
                     driver=self.name, bmc=settings.address,
                     user=bmc.username)
        return root

    def _system(self, bmc, client, settings):
        system_id = bmc.options.get("system_id")
        if not system_id:
            ids = self._call(
                bmc, "list systems",
                lambda: list(self._root(bmc, client, settings)
                             .get_system_collection().members_identities),
                client)
            if len(ids) != 1:
                raise self._fail(
                    bmc, "choose a system", "no system_id set and the BMC "
                    "lists %s" % ("no system" if not ids else
                                  "%d systems (%s); set system_id to one of "
                                  "them" % (len(ids), ", ".join(ids))))
            system_id = ids[0]
        return self._call(
            bmc, "get system %s" % system_id,
            lambda: self._root(bmc, client, settings).get_system(system_id),
            client)

    def _state(self, bmc, client, system, what, refresh=False):
        def read():
            if refresh:
                system.refresh(force=True)
            return system.power_state
        value = self._call(bmc, what, read, client)
        if value == sushy.PowerState.OFF:
            return base.PowerState.OFF
        if value is None:
            return base.PowerState.UNKNOWN
        # On, PoweringOn, PoweringOff, Paused: not proven off.
        return base.PowerState.ON

    def _wait_off(self, bmc, client, system):
        attempts = max(1, math.ceil(self.timeout / self.poll_interval)) + 1
        poll = tenacity.Retrying(
            retry=tenacity.retry_if_result(
                lambda state: state != base.PowerState.OFF),
            stop=(tenacity.stop_after_attempt(attempts)
                  | tenacity.stop_after_delay(self.timeout)),
            wait=tenacity.wait_fixed(self.poll_interval),
            sleep=self._sleep,
            retry_error_callback=lambda rs: rs.outcome.result(),
        )
        return poll(self._state, bmc, client, system, "poll power state",
                    refresh=True)

    def _call(self, bmc, what, func, client, tolerate=()):
        """Run one BMC request under the client's lock; retry only failures
        to connect; translate every library error into FenceError (an HTTP
        status in ``tolerate`` into _Rejected, for the caller to judge)."""
        def attempt():
            try:
                with client.lock:
                    return func()
            except (sushy_exc.ConnectionError,
                    requests.exceptions.ConnectionError,
                    requests.exceptions.Timeout) as e:
                if _is_tls_error(e):
                    raise    # a configuration problem: no retry
                raise _Transient(self._reason(bmc, e)) from e

        try:
            return base.retrying(attempt, _Transient, self.retries,
                                 self.poll_interval, self._sleep, dict(
                                     log=LOG, host=bmc.host, driver=self.name,
                                     action=what))
        except _Transient as e:
            raise self._fail(bmc, what, "BMC unreachable after %d attempts: %s"
                             % (self.retries, e), base.BmcUnreachable)
        except (sushy_exc.ConnectionError,
                requests.exceptions.ConnectionError) as e:
            raise self._fail(bmc, what, "TLS with the BMC failed (options "
                             "verify, cert_file, key_file): %s"
                             % self._reason(bmc, e))
        except sushy_exc.AccessError as e:
            close_client(client, bmc.host, "credentials refused")
            raise self._fail(bmc, what, "BMC rejected the credentials of "
                             "user %s (HTTP %s)" % (bmc.username,
                                                    e.status_code))
        except sushy_exc.HTTPError as e:
            if e.status_code in tolerate:
                raise _Rejected(e.status_code, self._reason(bmc, e))
            raise self._fail(bmc, what, "BMC refused the request (HTTP %s: "
                             "%s)" % (e.status_code, self._reason(bmc, e)))
        except sushy_exc.InvalidParameterValueError as e:
            raise self._fail(bmc, what, "the system does not offer this "
                             "(%s)" % self._reason(bmc, e))
        except (sushy_exc.SushyError, requests.exceptions.RequestException,
                OSError, ValueError, KeyError, TypeError) as e:
            raise self._fail(bmc, what, "Redfish error: %s"
                             % self._reason(bmc, e))

    def _reason(self, bmc, exc):
        text = getattr(exc, "detail", None) or str(exc)
        return mask_known(text, [bmc.password])

    def _fail(self, bmc, what, reason, kind=base.FenceError):
        LOG.error("fence_error", host=bmc.host, driver=self.name,
                  action=what, reason=reason)
        return kind("host %s: cannot %s: %s" % (bmc.host, what, reason))


def _identity(system):
    """system_identity's answer from a sushy System already read."""
    found = {}
    uid = getattr(system, "uuid", None)
    if uid:
        found["uuids"] = [str(uid).strip().lower()]
    name = getattr(system, "hostname", None)
    if name:
        found["hostname"] = str(name).strip().lower()
    return found or None


def _link(resource, key):
    value = resource.get(key) if isinstance(resource, dict) else None
    return value.get("@odata.id") if isinstance(value, dict) else None


def _members(get, path):
    """Each member of a collection at ``path``, read."""
    found = get(path) or {}
    return [get(m["@odata.id"]) for m in found.get("Members") or ()
            if isinstance(m, dict) and m.get("@odata.id")]


def _parts(system, get):
    """[(kind, [member JSON])] of a System's power supplies, fans and
    memory, read through ``get(path)`` (JSON) from the links it offers;
    a link a BMC does not offer is skipped."""
    supplies, fans, memory, boxes = [], [], [], []
    links = (system.get("Links") or {}).get("Chassis") or ()
    for chassis_link in links:
        path = chassis_link.get("@odata.id") \
            if isinstance(chassis_link, dict) else None
        if not path:
            continue
        chassis = get(path) or {}
        boxes.append(dict(chassis, Name=chassis.get("Name") or path))
        power = _link(chassis, "Power")
        if power:
            supplies += (get(power) or {}).get("PowerSupplies") or []
        elif _link(chassis, "PowerSubsystem"):
            sub = get(_link(chassis, "PowerSubsystem")) or {}
            if _link(sub, "PowerSupplies"):
                supplies += _members(get, _link(sub, "PowerSupplies"))
        thermal = _link(chassis, "Thermal")
        if thermal:
            fans += (get(thermal) or {}).get("Fans") or []
        elif _link(chassis, "ThermalSubsystem"):
            sub = get(_link(chassis, "ThermalSubsystem")) or {}
            if _link(sub, "Fans"):
                fans += _members(get, _link(sub, "Fans"))
    summary = system.get("MemorySummary") or {}
    rollup = health_mod.status_of("memory", summary, rollup=True)
    if rollup is not None:
        memory = [{"Name": "(summary)",
                   "Status": {"Health": rollup.severity.value}}]
        if rollup.severity is not health_mod.Severity.OK \
                and _link(system, "Memory"):
            try:       # (only to name the module at fault)
                memory += _members(get, _link(system, "Memory"))
            except base.FenceError:
                pass
    return [("chassis", boxes), ("power supply", supplies), ("fan", fans),
            ("memory", memory)]
