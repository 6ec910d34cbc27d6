"""One HTTP request from a test, as a client sees it (tests only)."""

import urllib.error
import urllib.request


def request(url, method="GET", body=None, headers=None, timeout=10):
    """(status, headers, raw body). An error status is an answer here,
    not an exception; a connection failure still raises."""
    req = urllib.request.Request(url, data=body, method=method,
                                 headers=dict(headers or {}))
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return resp.status, dict(resp.headers), resp.read()
    except urllib.error.HTTPError as e:
        return e.code, dict(e.headers), e.read()
