"""How the Nova driver talks to Nova: requests, retries, errors, pages.

:class:`NovaTransport` is the plumbing the Nova driver holds and hands to
its parts (capacity, moves, lifecycle, repair): a GET
retried on a transient failure, a write sent exactly once, Nova's errors
translated to :mod:`~instanceha.drivers.compute.base`'s exceptions, a
failure noted in ``api_record`` for the control-plane gate, and Nova's
paged lists (:class:`Listing`) followed over every page. Listed items are
Nova's bodies as given: instanceha reads Nova's own key names
(``OS-EXT-SRV-ATTR:host``, ``flavor`` with its ``extra_specs``, ...) where
openstacksdk's typed resources rename or drop them, and building one typed
resource per item only to keep its body cost more than the request itself
(several ms of CPU a server: 100 servers listed in 530 ms, 17 ms raw).
"""

import contextlib
import typing
import urllib.parse

import openstack
import tenacity
from keystoneauth1 import exceptions as ks_exc
import structlog

from instanceha.drivers.compute import base

LOG = structlog.get_logger("instanceha.nova")


class Listing(typing.NamedTuple):
    """One of Nova's lists: its path, the key its items come under
    (``servers``, with the next-page links under ``servers_links``) and
    the filters a caller may give, as (instanceha's name, Nova's query
    parameter) pairs. The names are openstacksdk's for the same filters
    (``compute_host`` is sent as ``host``)."""
    path: str
    key: str
    filters: tuple = ()


SERVERS = Listing("/servers", "servers", (("all_projects", "all_tenants"),
                                          ("compute_host", "host"),
                                          ("name", "name")))
MIGRATIONS = Listing("/os-migrations", "migrations",
                     (("migration_type", "migration_type"),
                      ("source_compute", "source_compute")))
AGGREGATES = Listing("/os-aggregates", "aggregates")
HYPERVISORS = Listing("/os-hypervisors", "hypervisors")


class NovaTransport:
    """Nova requests: sends through openstacksdk's compute proxy
    ``compute``, retries a read up to ``conf``'s ``[DEFAULT]
    api_read_retries`` (read at each call: a reload applies) with
    ``sleep`` between, notes a transient failure in ``record()`` (the
    driver's CallRecord, looked up at each failure: a start that waited
    for Nova hands the driver the one its sources already share) at
    ``clock()``, and asks ``gate()`` (None, or why not) right before each
    request that changes something."""

    def __init__(self, conf, compute, clock, sleep, record, gate):
        self._conf = conf
        self._compute = compute
        self._clock = clock
        self._sleep = sleep
        self._record = record
        self._gate = gate

    def read(self, what, fn):
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

    def call(self, method, path, microversion, **kwargs):
        """One request; Nova's answer as JSON (``{}`` for none)."""
        if method == "get":
            return self.read("GET %s" % path, lambda: self._send(
                method, path, microversion, **kwargs))
        return self._send(method, path, microversion, **kwargs)

    def _send(self, method, path, microversion, **kwargs):
        if method != "get":
            # The driver's write_gate (a coordinated member's may_act),
            # right before each request that changes something. Not a
            # failure of Nova's: not noted in api_record.
            why = self._gate()
            if why is not None:
                raise base.ComputeError("%s %s not sent: %s" % (
                    method.upper(), path, why))
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
                self._record().failed(self._clock(), what, e)
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

    def list(self, listing, what, microversion, per_page=None, **params):
        """Every item of one of Nova's lists (a :class:`Listing`), all
        pages, as openstacksdk's listing follows them: Nova's
        ``servers_links`` / ``migrations_links`` "next" link (a page holds
        at most Nova's [api] max_limit items, 1000 by default). ``params``
        are the listing's filters, and ``base_path`` a path other than
        its own (``/servers/detail``). Returns Nova's bodies, or with
        ``per_page(bodies of one page) -> items`` what it returns for
        each page, one list (only those are kept: a long listing's
        memory); errors translated; transient failures retried (the whole
        listing, ``per_page`` called again for its pages)."""
        return self.read("GET %s" % what, lambda: self._list_once(
            listing, what, microversion, per_page=per_page, **params))

    def _list_once(self, listing, what, microversion, **params):
        with self._noting("GET %s" % what):
            return self._list_all(listing, what, microversion, **params)

    def _list_all(self, listing, what, microversion, base_path=None,
                  per_page=None, **params):
        names = dict(listing.filters)
        unknown = set(params) - set(names)
        if unknown:
            raise TypeError("%s takes no filter %s" % (
                listing.path, ", ".join(sorted(unknown))))
        query = {names[k]: v for k, v in params.items()}
        uri = base_path or listing.path
        items = []
        while uri:
            data = self._page(what, uri, microversion, query)
            last_marker = query.pop("marker", None)
            query.pop("limit", None)
            page = data.get(listing.key) if isinstance(data, dict) else None
            if not isinstance(page, list):
                raise base.ComputeError("GET %s: answer lacks a %r list"
                                        % (what, listing.key))
            if not page:
                break
            items.extend(page if per_page is None else per_page(page))
            uri, next_params = next_page(listing.key, data)
            if "marker" in next_params and \
                    next_params["marker"] == last_marker:
                # Nova's next page starts after the page just read: the
                # same marker again would loop for ever.
                raise base.ComputeError(
                    "GET %s: endless pagination loop: the next page "
                    "starts again at marker %s" % (what, last_marker))
            query.update(next_params)
        return items

    def _page(self, what, uri, microversion, query):
        """One page of a list: Nova's JSON body."""
        try:
            resp = self._compute.get(
                uri, headers={"Accept": "application/json"},
                params=dict(query), microversion=microversion,
                raise_exc=False)
        except (ks_exc.ClientException,
                openstack.exceptions.SDKException) as e:
            raise base.ComputeError("GET %s: %s: %s" % (what,
                                                        type(e).__name__, e))
        status = resp.status_code
        if status >= 400:
            text = "GET %s: HTTP %s: %s" % (what, status, error_message(resp))
            if status == 404:
                raise base.NotFound(text, status)
            if status in (400, 409):
                raise base.Conflict(text, status)
            raise base.ComputeError(text, status)
        try:
            return resp.json()
        except ValueError:
            raise base.ComputeError("GET %s: answer is not JSON" % what)


def plain_400(call, method, path, microversion, **kwargs):
    """``call(method, path, microversion, ...)`` (a transport's ``call``)
    for a write whose 400 is a plain ComputeError, not the Conflict the
    transport makes of it (Nova's 400s there say the request was bad)."""
    try:
        return call(method, path, microversion, **kwargs)
    except base.Conflict as e:
        if e.status == 400:
            raise base.ComputeError(str(e), 400) from None
        raise


def next_page(key, data):
    """The next page of a list, as openstacksdk's listing finds it in the
    body: (its address without the query, its query parameters as lists of
    values), or (None, {}) on the last page. The link is the body's
    ``links``, else Nova's ``<key>_links``, else a ``next`` field; its
    query (Nova's filters again and the marker) replaces the parameters
    sent. (openstacksdk would also read an HTTP Link header, under a key
    requests does not give it; Nova sends none.)"""
    link = None
    links = data.get("links" if "links" in data else "%s_links" % key) or ()
    if isinstance(links, dict):
        links = [{k: v} for k, v in links.items()]
    for item in links:
        if isinstance(item, dict) and item.get("rel") == "next" \
                and "href" in item:
            link = item["href"]
            break
    link = link or data.get("next")
    if link and link.startswith("/v"):
        link = link[link.find("/", 1):]
    if not link:
        return None, {}
    parts = urllib.parse.urlparse(link)
    return (urllib.parse.urljoin(link, parts.path),
            urllib.parse.parse_qs(parts.query))


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
