"""What the ``openstack instanceha`` commands share: one request to the
operator API whose refusal becomes the CLI's error, and how times and
nested values are shown."""

import time

from osc_lib.cli import format_columns
from osc_lib import exceptions

from instanceha.api import client


def send(app, what, request, *args, ok=(200,)):
    """The decoded answer of ``request(client, *args)`` on the app's
    instanceha client; any other status than ``ok`` is a CommandError
    with the API's own text."""
    api = app.client_manager.instanceha
    try:
        code, answer = request(api, *args)
    except client.ClientError as e:
        raise exceptions.CommandError("instanceha: %s" % e)
    if code not in ok:
        raise exceptions.CommandError("instanceha: %s refused (%d): %s" % (
            what, code, client.error_text(answer)))
    return answer


def iso(at):
    """Epoch seconds as ISO 8601 UTC to the second (None stays None)."""
    if at is None:
        return None
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(at))


def nested(value):
    """A list or dict shown on one line in a table, as itself in JSON and
    YAML."""
    if isinstance(value, dict):
        return format_columns.DictColumn(value)
    if isinstance(value, list):
        return format_columns.ListColumn(value)
    return value


def show(fields):
    """ShowOne's (columns, values) from [(column, value)]."""
    return (tuple(c for c, _v in fields),
            tuple(nested(v) for _c, v in fields))
