"""``openstack instanceha server repair`` and ``server repair show``."""

import json

from osc_lib import exceptions
import pytest

from instanceha.osc.v1 import server
from tests.unit.osc.fakes import FakeSession, output, run

SID = "0b5e2c1e-6a0b-4a54-9bd2-0f7a1c3c9e11"
PATH = "/servers/%s/repair" % SID


def test_repair_up_to_a_level_shows_the_case():
    s = FakeSession({("POST", PATH): [(202, {
        "server": SID, "command": "repair", "level": "reboot",
        "case": {"pending": "start"}})]})
    shown = json.loads(output(server.RepairServer, s,
                              [SID, "--level", "reboot", "--reason", "x",
                               "-f", "json"]))
    assert s.requests[0]["body"] == {"reason": "x", "level": "reboot"}
    assert shown == {"server": SID, "command": "repair", "level": "reboot",
                     "case": {"pending": "start"}}


def test_clear_sends_clear_only():
    s = FakeSession({("POST", PATH): [(202, {"server": SID,
                                             "command": "clear"})]})
    shown = json.loads(output(server.RepairServer, s,
                              [SID, "--clear", "-f", "json"]))
    assert s.requests[0]["body"] == {"reason": "by openstack instanceha",
                                     "clear": True}
    assert shown == {"server": SID, "command": "clear"}


def test_an_unknown_server_is_the_apis_refusal():
    s = FakeSession({("POST", PATH): [(404, {
        "error": "no server %s in Nova" % SID})]})
    with pytest.raises(exceptions.CommandError) as err:
        run(server.RepairServer, s, [SID])
    assert str(err.value) == ("instanceha: repair refused (404): no server "
                              "%s in Nova" % SID)


def test_level_and_clear_together_and_a_bad_level_are_refused():
    for argv in ([SID, "--level", "reboot", "--clear"],
                 [SID, "--level", "reformat"]):
        s = FakeSession()
        with pytest.raises(SystemExit):
            run(server.RepairServer, s, argv)
        assert s.requests == []


def test_repair_show_reads_the_case():
    s = FakeSession({("GET", PATH): [(200, {
        "server": SID, "markers": {"result": "start ok"}, "rows": []})]})
    shown = json.loads(output(server.ShowServerRepair, s,
                              [SID, "-f", "json"]))
    assert shown == {"server": SID, "markers": {"result": "start ok"},
                     "rows": []}
