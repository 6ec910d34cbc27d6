"""Request checks of the simulated Nova API: the few body schemas
instanceha's calls need, with Nova's messages, and Nova's limit/marker
paging of listings."""

import re
import urllib.parse

from instanceha.sim.nova_wire import ApiFault

BOOL_TRUE = [True, "True", "TRUE", "true", "1", "ON", "On", "on",
             "YES", "Yes", "yes"]
BOOL_FALSE = [False, "False", "FALSE", "false", "0", "OFF", "Off", "off",
              "NO", "No", "no"]
UUID_RE = re.compile(r"^[0-9a-fA-F]{8}-?([0-9a-fA-F]{4}-?){3}[0-9a-fA-F]{12}$")


def invalid(field, value, reason):
    raise ApiFault(400, "Invalid input for field/attribute %s. Value: %s. %s"
                   % (field, value, reason))


def check_bool(field, value):
    if value not in BOOL_TRUE + BOOL_FALSE or isinstance(value, int) \
            and not isinstance(value, bool):
        invalid(field, value, "%r is not one of %r"
                % (value, BOOL_TRUE + BOOL_FALSE))
    return value in BOOL_TRUE


def check_string(field, value, max_len=255):
    if not isinstance(value, str):
        invalid(field, value, "%r is not of type 'string'" % (value,))
    if len(value) < 1:
        invalid(field, value, "%r is too short" % (value,))
    if len(value) > max_len:
        invalid(field, value, "%r is too long" % (value,))
    return value


def check_keys(body, allowed, required=()):
    if not isinstance(body, dict):
        raise ApiFault(400, "%r is not of type 'object'" % (body,))
    extra = sorted(set(body) - set(allowed))
    if extra:
        raise ApiFault(400, "Additional properties are not allowed (%s %s "
                            "unexpected)" % (", ".join(repr(e) for e in extra),
                                             "was" if len(extra) == 1
                                             else "were"))
    for key in required:
        if key not in body:
            raise ApiFault(400, "%r is a required property" % key)


def paginate(req, items, key, not_found, max_limit=1000):
    """Nova's limit/marker paging: items after ``marker``, at most
    ``limit``, itself capped at ``max_limit`` (Nova's [api] max_limit,
    1000 by default). Returns (page, next): ``next`` is true when the page
    is full, even if nothing follows, as Nova's ``_get_collection_links``
    decides (a client learns it is done from a short or empty page)."""
    raw_limit = req.arg("limit")
    limit = max_limit
    if raw_limit is not None:
        try:
            limit = int(raw_limit)
        except ValueError:
            limit = -1
        if limit < 0:
            raise ApiFault(400, "Invalid input for query parameters limit. "
                                "Value: %s. %r is not a valid positive "
                                "integer" % (raw_limit, raw_limit))
        limit = min(limit, max_limit)
    marker = req.arg("marker")
    if marker is not None:
        keys = [key(i) for i in items]
        if marker not in keys:
            raise ApiFault(400, not_found % marker)
        items = items[keys.index(marker) + 1:]
    page = items[:limit]
    return page, bool(page) and len(page) == limit


def next_links(req, marker):
    """Nova's ``*_links``: one "next" link, the request's own query
    (sorted, as Nova's ``_get_next_link`` writes it) with ``marker``."""
    query = {k: v[-1] for k, v in sorted(req.query.items())}
    query["marker"] = marker
    return [{"rel": "next", "href": "%s%s?%s" % (
        req.base_url, req.path, urllib.parse.urlencode(query))}]


def read_body(req):
    """The request's JSON body; a 400 when it is not JSON."""
    try:
        return req.json()
    except (ValueError, UnicodeDecodeError):
        raise ApiFault(400, "Malformed request body")
