"""The invariant on the real-peer bed: every evacuate request on its way to
real nova-api, with the power state of the server's host at that instant.

nova-api is reached through a plain forwarding proxy of ours (the bed's
``api_url``; :class:`functional.peers.faultproxy.HttpFaultProxy` with no
faults), whose ``inspect`` is :meth:`EvacuateRecorder.inspect`. For each
``POST .../servers/<id>/action`` whose body holds ``evacuate``, before the
request is forwarded, it asks nova-api itself (directly, as the admin) for
the server's host, then reads that host's power from the BMC the bed links
to its compute (the Redfish emulator, sushy-tools, or ipmi_sim's power
file), and publishes an :class:`instanceha.sim.invariant.EvacuateRequest`
that functional/conftest.py checks after each test. Every other request
costs one regular-expression test.
"""

import json
import re
import time
import urllib.parse

from instanceha.sim import invariant

ACTION = re.compile(r"/servers/([^/]+)/action/?$")
POWER = {"on": "On", "off": "Off", "poweringon": "PoweringOn",
         "poweringoff": "PoweringOff"}


def evacuated_server(method, path, body):
    """The server id of an evacuate request, else None."""
    if method != "POST":
        return None
    match = ACTION.search(urllib.parse.urlsplit(path).path)
    if match is None:
        return None
    try:
        doc = json.loads(body or b"")
    except (ValueError, UnicodeDecodeError):
        return None
    if not isinstance(doc, dict) or "evacuate" not in doc:
        return None
    return urllib.parse.unquote(match.group(1))


class EvacuateRecorder:
    """``server_host(id)``: the server's host as nova-api has it (None: no
    such server; raises when nova-api cannot say). ``power_of(host)``: the
    host's BMC power as the emulator reports it ('on', 'off', ...; raises
    when it cannot be read). Either may be set after construction."""

    def __init__(self, server_host, power_of=None, where="real-nova",
                 clock=time.time):
        self.server_host = server_host
        self.power_of = power_of
        self.where = where
        self.clock = clock
        self.records = []

    def _power(self, host):
        if self.power_of is None or host is None:
            return invariant.UNKNOWN
        try:
            state = self.power_of(host)
        except Exception:       # noqa: BLE001 - unreadable is unsafe
            return invariant.UNKNOWN
        return POWER.get(str(state).lower(), invariant.UNKNOWN)

    def inspect(self, method, path, body):
        server = evacuated_server(method, path, body)
        if server is None:
            return None
        try:
            host = self.server_host(server)
        except Exception:       # noqa: BLE001 - unknown host: unsafe
            host = "(unknown: nova-api did not say)"
        else:
            if host is None:
                return None     # no such server: Nova answers 404
        at = self.clock()
        record = invariant.EvacuateRequest(at, server, host,
                                           self._power(host), self.where)
        self.records.append(record)
        invariant.publish(record)
        return record
