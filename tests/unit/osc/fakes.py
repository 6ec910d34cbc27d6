"""A keystoneauth session stand-in for the ``openstack instanceha``
commands: scripted answers by (method, path), every request recorded. The
commands run on the real operator API client (instanceha.api.client) over
it; nothing leaves the process."""

import io
import json
import types
import urllib.parse

from instanceha.api import client

ENDPOINT = "http://ha.example.test:7411"


class Response:
    def __init__(self, status, body):
        self.status_code = status
        self.content = body if isinstance(body, bytes) else \
            json.dumps(body).encode()


class FakeSession:
    """``answers``: {(method, path): [(status, body), ...]} (one answer
    per request, the last repeated) or an exception to raise."""

    def __init__(self, answers=None):
        self.answers = dict(answers or {})
        self.requests = []

    def request(self, url, method, data=None, headers=None, raise_exc=True,
                timeout=None):
        assert raise_exc is False     # the client reads every status itself
        parts = urllib.parse.urlsplit(url)
        self.requests.append({
            "method": method, "url": url, "path": parts.path,
            "query": dict(urllib.parse.parse_qsl(parts.query)),
            "body": json.loads(data) if data else None,
            "headers": dict(headers or {}), "timeout": timeout})
        script = self.answers.get((method, parts.path))
        if script is None:
            return Response(404, {"error": "no such endpoint: %s %s"
                                  % (method, parts.path)})
        if isinstance(script, Exception):
            raise script
        status, body = script[0] if len(script) == 1 else script.pop(0)
        return Response(status, body)


def app(session):
    """What an osc-lib command reads of its app: the client manager's
    ``instanceha`` client, stdout and stderr."""
    return types.SimpleNamespace(
        client_manager=types.SimpleNamespace(
            instanceha=client.APIClient.from_session(session, ENDPOINT)),
        stdout=io.StringIO(), stderr=io.StringIO(),
        options=types.SimpleNamespace(debug=False))


def run(cls, session, argv, prog="openstack instanceha"):
    """(command, parsed args, take_action's result)."""
    cmd = cls(app(session), None)
    parsed = cmd.get_parser(prog).parse_args(argv)
    return cmd, parsed, cmd.take_action(parsed)


def output(cls, session, argv):
    """What the command prints through cliff's formatter (``argv`` with
    ``-f json`` or ``-f value``)."""
    cmd = cls(app(session), None)
    parsed = cmd.get_parser("openstack instanceha").parse_args(argv)
    assert cmd.run(parsed) == 0
    return cmd.app.stdout.getvalue()
