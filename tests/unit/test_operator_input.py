"""Operator inputs that could switch HA off for a host without anyone
asking for it: a suspension with no end, in the CLI and the API."""

import argparse
import json

import pytest

from instanceha.api.server import OperatorAPI
from instanceha.cmd import main as cli
from tests.unit.test_engine import World


def _api():
    w = World()
    w.pass_()
    return w, OperatorAPI(w.conf, w.engine, w.clock)


def _suspend(api, body):
    raw = body if isinstance(body, bytes) else json.dumps(body).encode()
    status, _, answer = api.handle("POST", "/hosts/compute-0/suspend", raw)
    return status, json.loads(answer)


# -- API ----------------------------------------------------------------------

@pytest.mark.parametrize("raw", [
    b'{"seconds": NaN}', b'{"seconds": Infinity}', b'{"seconds": -Infinity}',
    b'{"seconds": 1e999}', b'{"seconds": 0}', b'{"seconds": -5}',
    b'{"seconds": "60"}', b'{"seconds": true}', b'{"seconds": null}', b'{}',
    b'', b'{"reason": "x"}', b'{"forever": false}', b'{"forever": "yes"}',
    b'{"seconds": 60, "forever": true}', b'{"seconds": 604801}',
])
def test_a_suspension_that_would_not_end_or_is_malformed_is_refused(raw):
    w, api = _api()
    status, answer = _suspend(api, raw)
    assert status == 400, answer
    assert answer["error"].startswith("bad request body: ")
    w.drain()
    assert w.state("compute-0")[0] == "active"


def test_refusals_say_what_to_send():
    w, api = _api()
    assert "NaN is not a number" in _suspend(api, b'{"seconds": NaN}')[1][
        "error"]
    error = _suspend(api, {"reason": "x"})[1]["error"]
    assert '"seconds": N' in error and '"forever": true' in error
    error = _suspend(api, {"seconds": 10 ** 7})[1]["error"]
    assert "at most 604800" in error and "max_suspend_seconds" in error
    error = _suspend(api, {"seconds": 5, "forever": True})[1]["error"]
    assert "not both" in error


def test_the_maximum_is_configurable():
    w, api = _api()
    w.conf.set_override("max_suspend_seconds", 100, "api")
    assert _suspend(api, {"seconds": 101})[0] == 400
    assert _suspend(api, {"seconds": 100})[0] == 202


def test_suspend_for_seconds_answers_until_and_still_running():
    w, api = _api()
    status, answer = _suspend(api, {"seconds": 30, "reason": "firmware"})
    assert status == 202
    assert answer["until"] == w.clock() + 30
    assert "still_running" in answer
    w.drain()
    assert w.state("compute-0")[0] == "suspended"


def test_suspend_forever_only_when_asked_and_it_lasts():
    w, api = _api()
    status, answer = _suspend(api, {"forever": True, "reason": "rack move"})
    assert status == 202 and answer["until"] is None
    w.drain()
    w.compute.kill("compute-0")
    for _ in range(40):
        w.pass_()
    assert w.state("compute-0")[0] == "suspended"
    assert w.fencer.powered_off == []


def test_still_running_is_the_engines_account_of_the_host():
    w, api = _api()
    seen = []

    def running_work(host_id):
        seen.append(host_id)
        return "evacuate: 3 of 10 servers sent, 2 in flight"
    w.engine.running_work = running_work
    status, answer = _suspend(api, {"seconds": 60})
    assert status == 202
    assert answer["still_running"] == \
        "evacuate: 3 of 10 servers sent, 2 in flight"
    assert seen == [w.engine.find("compute-0").id]
    w.engine.running_work = lambda host_id: None
    assert _suspend(api, {"seconds": 60})[1]["still_running"] is None


def test_seconds_and_forever_belong_to_suspend_only():
    w, api = _api()
    status, _, body = api.handle("POST", "/hosts/compute-0/maintenance",
                                 b'{"seconds": 60}')
    assert status == 400 and b"suspend only" in body


# -- CLI ----------------------------------------------------------------------

@pytest.mark.parametrize("value", ["0", "-1", "nan", "NaN", "inf",
                                   "-inf", "Infinity", "1e999", "soon"])
def test_cli_seconds_must_be_positive_and_finite(value):
    with pytest.raises(argparse.ArgumentTypeError) as err:
        cli.positive_seconds(value)
    assert repr(value) in str(err.value)


def _cli_error(capsys, *argv):
    with pytest.raises(SystemExit) as exit_:
        cli.main(["suspend", *argv])
    assert exit_.value.code == 2
    return capsys.readouterr().err


@pytest.mark.parametrize("value", ["0", "nan", "inf", "-3"])
def test_cli_refuses_bad_seconds_before_calling_the_service(capsys, value):
    err = _cli_error(capsys, "compute-1", "--seconds", value)
    assert "--seconds" in err and "positive, finite" in err


def test_cli_suspend_needs_seconds_or_forever(capsys):
    err = _cli_error(capsys, "compute-1", "--reason", "disk swap")
    assert "give --seconds N or --forever" in err


def test_cli_seconds_and_forever_together_are_refused(capsys):
    err = _cli_error(capsys, "compute-1", "--seconds", "60", "--forever")
    assert "not allowed with argument" in err


def test_cli_seconds_above_the_maximum_are_refused(capsys, tmp_path):
    path = tmp_path / "instanceha.conf"
    path.write_text("[api]\nmax_suspend_seconds = 600\n")
    err = _cli_error(capsys, "compute-1", "--seconds", "601",
                     "--config-file", str(path))
    assert "at most 600" in err and "--forever" in err


def test_cli_prints_until_and_what_still_runs():
    text = cli.format_answer("suspend", {
        "host": "compute-1", "state": "evacuating", "until": 3600.0,
        "still_running": "evacuate: 3 of 10 servers sent"}, now=0.0)
    assert text.splitlines() == [
        "compute-1: suspend requested (was evacuating); until "
        "1970-01-01T01:00:00Z (in 60m)",
        "still running for compute-1: evacuate: 3 of 10 servers sent"]
    text = cli.format_answer("suspend", {
        "host": "compute-1", "state": "active", "until": None,
        "still_running": None})
    assert text == ("compute-1: suspend requested (was active); until "
                    "'instanceha resume compute-1'")
