"""Redfish fencing through sushy — the only module that imports sushy.

Per host (an inventory.BMC): ``address`` is the BMC URL, ``username`` and
``password`` its basic-auth credentials, ``options`` may hold ``system_id``
(default: the only system in the Systems collection) and ``verify`` (TLS:
true (default), false, or a CA bundle path).

``power_off`` sends ForceOff unless the BMC already says Off, then polls
PowerState every ``[fencing] poll_interval`` until Off or ``[fencing]
timeout``. Requests that fail to connect are retried ``[fencing] retries``
times; a BMC that answers with an error is not retried (it refused). Every
failure becomes :class:`FenceError` naming the host and the reason, never
the password.
"""

import math
import time

import requests
import structlog
import sushy
from sushy import exceptions as sushy_exc
import tenacity

from instanceha.drivers.fencing import base

LOG = structlog.get_logger("instanceha.fencing.redfish")

_TRUE = ("1", "true", "yes", "on")
_FALSE = ("0", "false", "no", "off")


class _Transient(Exception):
    """A request that did not reach the BMC; worth another attempt."""


def _is_tls_error(exc):
    seen = set()
    while exc is not None and id(exc) not in seen:
        if isinstance(exc, requests.exceptions.SSLError):
            return True
        seen.add(id(exc))
        exc = exc.__cause__ or exc.__context__
    return False


class RedfishDriver(base.FencingDriver):
    name = "redfish"

    def __init__(self, conf, sleep=None):
        self.timeout = float(conf.fencing.timeout)
        self.poll_interval = float(conf.fencing.poll_interval)
        self.retries = int(conf.fencing.retries)
        # Injectable so unit tests drive polls and retries without sleeping.
        self._sleep = sleep or time.sleep

    # -- FencingDriver -------------------------------------------------------

    def power_state(self, bmc):
        system = self._system(bmc)
        return self._state(bmc, system, "read power state")

    def power_off(self, bmc):
        system = self._system(bmc)
        state = self._state(bmc, system, "read power state")
        if state == base.PowerState.OFF:
            LOG.info("fence_already_off", host=bmc.host, driver=self.name)
            return
        self._call(bmc, "send ForceOff",
                   lambda: system.reset_system(sushy.ResetType.FORCE_OFF))
        LOG.info("fence_reset_sent", host=bmc.host, driver=self.name,
                 reset="ForceOff", state=state.value)
        state = self._wait_off(bmc, system)
        if state != base.PowerState.OFF:
            LOG.error("fence_timeout", host=bmc.host, driver=self.name,
                      timeout=self.timeout, state=state.value)
            raise base.FenceError(
                "host %s: BMC did not report power Off within %gs after "
                "ForceOff (last state: %s)" % (bmc.host, self.timeout,
                                               state.value))
        LOG.info("fence_confirmed_off", host=bmc.host, driver=self.name)

    def power_on(self, bmc):
        system = self._system(bmc)
        state = self._state(bmc, system, "read power state")
        if state == base.PowerState.ON:
            LOG.info("power_on_skipped", host=bmc.host, driver=self.name,
                     reason="already on")
            return
        self._call(bmc, "send On",
                   lambda: system.reset_system(sushy.ResetType.ON))
        LOG.info("power_on_sent", host=bmc.host, driver=self.name)

    # -- helpers -------------------------------------------------------------

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

    def _connect(self, bmc):
        auth = sushy.auth.BasicAuth(username=bmc.username,
                                    password=bmc.password)
        return sushy.Sushy(bmc.address, auth=auth, verify=self._verify(bmc),
                           # One attempt per call: retries are ours.
                           server_side_retries=1,
                           server_side_retries_delay=self.poll_interval,
                           read_timeout=min(self.timeout, 30.0),
                           connect_timeout=min(self.timeout, 10.0))

    def _system(self, bmc):
        system_id = bmc.options.get("system_id")

        def get():
            return self._connect(bmc).get_system(system_id)
        return self._call(bmc, "get system %s" % (system_id or "(default)"),
                          get)

    def _state(self, bmc, system, what, refresh=False):
        def read():
            if refresh:
                system.refresh(force=True)
            return system.power_state
        value = self._call(bmc, what, read)
        if value == sushy.PowerState.OFF:
            return base.PowerState.OFF
        if value is None:
            return base.PowerState.UNKNOWN
        # On, PoweringOn, PoweringOff, Paused: not proven off.
        return base.PowerState.ON

    def _wait_off(self, bmc, system):
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
        return poll(self._state, bmc, system, "poll power state",
                    refresh=True)

    def _call(self, bmc, what, func):
        """Run one BMC request; retry only failures to connect; translate
        every library error into FenceError."""
        def attempt():
            try:
                return func()
            except (sushy_exc.ConnectionError,
                    requests.exceptions.ConnectionError,
                    requests.exceptions.Timeout) as e:
                if _is_tls_error(e):
                    raise    # a configuration problem: no retry
                raise _Transient(self._reason(bmc, e)) from e

        def log_retry(rs):
            LOG.warning("bmc_retry", host=bmc.host, driver=self.name,
                        action=what, attempt=rs.attempt_number,
                        reason=str(rs.outcome.exception()))

        retrying = tenacity.Retrying(
            retry=tenacity.retry_if_exception_type(_Transient),
            stop=tenacity.stop_after_attempt(self.retries),
            wait=tenacity.wait_fixed(self.poll_interval),
            sleep=self._sleep, before_sleep=log_retry, reraise=True)
        try:
            return retrying(attempt)
        except _Transient as e:
            raise self._fail(bmc, what, "BMC unreachable after %d attempts: %s"
                             % (self.retries, e))
        except (sushy_exc.ConnectionError,
                requests.exceptions.ConnectionError) as e:
            raise self._fail(bmc, what, "TLS verification of the BMC failed "
                             "(option verify): %s" % self._reason(bmc, e))
        except sushy_exc.AccessError as e:
            raise self._fail(bmc, what, "BMC rejected the credentials of "
                             "user %s (HTTP %s)" % (bmc.username,
                                                    e.status_code))
        except sushy_exc.HTTPError as e:
            raise self._fail(bmc, what, "BMC refused the request (HTTP %s: "
                             "%s)" % (e.status_code, self._reason(bmc, e)))
        except sushy_exc.UnknownDefaultError as e:
            raise self._fail(bmc, what, "no system_id set and the BMC does "
                             "not list exactly one system (%s)"
                             % self._reason(bmc, e))
        except (sushy_exc.SushyError, requests.exceptions.RequestException,
                ValueError, KeyError, TypeError) as e:
            raise self._fail(bmc, what, "Redfish error: %s"
                             % self._reason(bmc, e))

    def _reason(self, bmc, exc):
        text = getattr(exc, "detail", None) or str(exc)
        if bmc.password:
            text = text.replace(bmc.password, "***")
        return text

    def _fail(self, bmc, what, reason):
        LOG.error("fence_error", host=bmc.host, driver=self.name,
                  action=what, reason=reason)
        return base.FenceError("host %s: cannot %s: %s"
                               % (bmc.host, what, reason))
