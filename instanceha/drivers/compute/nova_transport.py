"""How the Nova driver talks to Nova: requests, retries, errors, pages.

:class:`NovaTransport` is the plumbing the Nova driver is built on: a GET
retried on a transient failure, a write sent exactly once, Nova's errors
translated to :mod:`~instanceha.drivers.compute.base`'s exceptions, a
failure noted in ``api_record`` for the control-plane gate, and typed
openstacksdk listings followed over every page. The typed
resources below keep Nova's bodies as given (``nova_body``).
"""

import contextlib

import openstack
import tenacity
from keystoneauth1 import exceptions as ks_exc
from openstack.compute.v2 import aggregate as sdk_aggregate
from openstack.compute.v2 import hypervisor as sdk_hypervisor
from openstack.compute.v2 import migration as sdk_migration
from openstack.compute.v2 import server as sdk_server
import structlog

from instanceha.drivers.compute import base

LOG = structlog.get_logger("instanceha.nova")


class KeepsBody:
    """Mixin for openstacksdk's typed resources: each listed item also
    keeps Nova's answer as given (``nova_body``), because instanceha reads
    Nova's own key names (``OS-EXT-SRV-ATTR:host``, ``flavor`` with its
    ``extra_specs``, ...) where the SDK renames or drops them."""

    @classmethod
    def existing(cls, connection=None, **attrs):
        body = {k: v for k, v in attrs.items() if k != "microversion"}
        obj = super().existing(connection=connection, **attrs)
        obj.nova_body = body
        return obj


class ServerResource(KeepsBody, sdk_server.Server):
    pass


class MigrationResource(KeepsBody, sdk_migration.Migration):
    pass


class AggregateResource(KeepsBody, sdk_aggregate.Aggregate):
    pass


class HypervisorResource(KeepsBody, sdk_hypervisor.Hypervisor):
    pass


class NovaTransport:
    """Mixin: Nova requests for a driver that has ``_conf`` (for
    ``[DEFAULT] api_read_retries``), ``_sleep``, ``_clock``, ``_compute``
    (openstacksdk's compute proxy) and ``api_record``."""

    def _read(self, what, fn):
        """``fn()`` (a GET), sent again on a transient failure (5xx, no
        answer) up to ``[DEFAULT] api_read_retries`` times. A 4xx is an
        answer and raised at once."""
        def log(state):
            LOG.info("nova_read_retry", call=what,
                     attempt=state.attempt_number,
                     reason="transient failure, sending the read again: %s"
                     % state.outcome.exception())
        retrying = tenacity.Retrying(
            stop=tenacity.stop_after_attempt(
                1 + self._conf.api_read_retries),
            wait=tenacity.wait_exponential(multiplier=0.25, max=2.0),
            retry=tenacity.retry_if_exception(transient),
            sleep=self._sleep, before_sleep=log, reraise=True)
        return retrying(fn)

    def _call(self, method, path, microversion, **kwargs):
        if method == "get":
            return self._read("GET %s" % path, lambda: self._send(
                method, path, microversion, **kwargs))
        return self._send(method, path, microversion, **kwargs)

    def _send(self, method, path, microversion, **kwargs):
        with self._noting("%s %s" % (method.upper(), path)):
            return self._send_once(method, path, microversion, **kwargs)

    @contextlib.contextmanager
    def _noting(self, what):
        """Note a request Nova's API failed (5xx, no answer, not JSON) in
        api_record, when it failed: the control-plane gate holds every
        power-off from then until os-services is read whole again."""
        try:
            yield
        except base.ComputeError as e:
            if transient(e):
                self.api_record.failed(self._clock(), what, e)
            raise

    def _send_once(self, method, path, microversion, **kwargs):
        if method != "get":
            # A write is sent once: keystoneauth would send it again on a
            # connection failure or a 503 if clouds.yaml asked for it
            # (connect_retries, status_code_retries), and an evacuation
            # sent twice rebuilds a server twice.
            kwargs.update(connect_retries=0, status_code_retries=0)
        try:
            resp = getattr(self._compute, method)(
                path, microversion=microversion, raise_exc=False, **kwargs)
        except ks_exc.ClientException as e:
            raise base.ComputeError("%s %s: %s" % (method.upper(), path,
                                                   type(e).__name__),
                                    unanswered=may_have_been_sent(e))
        if resp.status_code < 400:
            if resp.status_code == 204 or not resp.content:
                return {}
            try:
                return resp.json()
            except ValueError:
                raise base.ComputeError("%s %s: answer is not JSON"
                                        % (method.upper(), path))
        message = error_message(resp)
        text = "%s %s: HTTP %d: %s" % (method.upper(), path, resp.status_code,
                                       message)
        if resp.status_code == 404:
            raise base.NotFound(text, resp.status_code)
        if resp.status_code in (400, 409):
            raise base.Conflict(text, resp.status_code)
        raise base.ComputeError(text, resp.status_code,
                                unanswered=resp.status_code in (502, 504))

    def _list(self, resource, what, microversion, **params):
        """Every item of a typed openstacksdk list, all pages: the SDK
        follows Nova's ``servers_links`` / ``migrations_links`` "next" links
        (a page holds at most Nova's [api] max_limit items, 1000 by
        default). Returns Nova's bodies; errors translated; transient
        failures retried (the whole listing)."""
        return self._read("GET %s" % what, lambda: self._list_once(
            resource, what, microversion, **params))

    def _list_once(self, resource, what, microversion, **params):
        with self._noting("GET %s" % what):
            return self._list_all(resource, what, microversion, **params)

    def _list_all(self, resource, what, microversion, **params):
        try:
            return [item.nova_body for item in resource.list(
                self._compute, microversion=microversion, **params)]
        except openstack.exceptions.HttpException as e:
            status = e.status_code
            message = (error_message(e.response) if e.response is not None
                       else e.details or str(e))
            text = "GET %s: HTTP %s: %s" % (what, status, message)
            if status == 404:
                raise base.NotFound(text, status)
            if status in (400, 409):
                raise base.Conflict(text, status)
            raise base.ComputeError(text, status)
        except (ks_exc.ClientException,
                openstack.exceptions.SDKException) as e:
            raise base.ComputeError("GET %s: %s: %s" % (what,
                                                        type(e).__name__, e))


def may_have_been_sent(e):
    """keystoneauth failed a request without an answer from Nova: was it
    perhaps sent? Only a refused connection surely never reached the API;
    a timeout (keystoneauth reports a read timeout as ConnectTimeout, like
    a connect timeout), a connection cut or anything unknown may have."""
    if isinstance(e, ks_exc.ConnectFailure) and \
            "connection refused" in str(e).lower():
        return False
    return isinstance(e, ks_exc.ConnectionError)


def transient(e):
    """A failure a second try of the same read may not meet: Nova's 5xx
    or no answer at all (status None). Not a 4xx (an answer)."""
    return (isinstance(e, base.ComputeError)
            and not isinstance(e, (base.NotFound, base.Conflict))
            and (e.status is None or int(e.status) >= 500))


def error_message(resp):
    try:
        body = resp.json()
    except ValueError:
        return resp.text[:200]
    if isinstance(body, dict) and len(body) == 1:
        inner = next(iter(body.values()))
        if isinstance(inner, dict) and "message" in inner:
            return inner["message"]
    return str(body)[:200]
