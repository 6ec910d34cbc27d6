"""``openstack instanceha storm resume``."""

import json

from osc_lib import exceptions
import pytest

from instanceha.osc.v1 import storm
from tests.unit.osc.fakes import FakeSession, output, run


def test_storm_resume_lifts_the_hold_and_shows_each_scope():
    s = FakeSession({("POST", "/storm/resume"): [(202, {
        "command": "resume --storm", "lifted": {"az1": 2}})]})
    shown = json.loads(output(storm.ResumeStorm, s,
                              ["--reason", "rack back", "-f", "json"]))
    assert s.requests[0]["body"] == {"reason": "rack back"}
    assert shown == {"command": "resume --storm", "lifted": {"az1": 2}}


def test_no_hold_to_lift_is_the_error():
    s = FakeSession({("POST", "/storm/resume"): [(409, {
        "error": "no storm hold to lift"})]})
    with pytest.raises(exceptions.CommandError) as err:
        run(storm.ResumeStorm, s, [])
    assert str(err.value) == ("instanceha: storm resume refused (409): no "
                              "storm hold to lift")
    assert s.requests[0]["body"] == {"reason": "by storm resume"}
