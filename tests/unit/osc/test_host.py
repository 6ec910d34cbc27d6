"""``openstack instanceha host ...`` on a scripted session: what each
command sends, the columns it shows, and the API's refusals as the
command's error (osc-lib's CommandError, the API's own text)."""

import json

from keystoneauth1 import exceptions as ks_exc
from osc_lib import exceptions
import pytest

from instanceha.osc.v1 import host
from tests.unit.osc.fakes import ENDPOINT, FakeSession, output, run

T0 = 1795000000.0          # 2026-11-18T11:06:40Z
STATUS = {
    "cluster": {"ok": True, "reason": ""},
    "hosts": [
        {"id": "s1", "name": "compute1", "state": "active", "since": T0,
         "reason": "heartbeating", "heartbeat_ok": True, "busy": False,
         "retrying": None, "operator_disabled": None,
         "agent": "agent beating"},
        {"id": "s2", "name": "compute2", "state": "suspended",
         "since": T0 + 60, "reason": "firmware", "heartbeat_ok": True,
         "busy": False, "retrying": None, "operator_disabled": None,
         "agent": None},
    ]}


def _status(status=STATUS):
    return FakeSession({("GET", "/status"): [(200, status)]})


def _post(path, *answers):
    return FakeSession({("POST", path): list(answers)})


def test_list_shows_every_host_its_state_since_and_reason():
    s = _status()
    _cmd, _args, (columns, rows) = run(host.ListHost, s, [])
    assert columns == ("Host", "State", "Since", "Reason")
    assert list(rows) == [
        ("compute1", "active", "2026-11-18T11:06:40Z", "heartbeating"),
        ("compute2", "suspended", "2026-11-18T11:07:40Z", "firmware")]
    req, = s.requests
    assert (req["method"], req["url"]) == ("GET", ENDPOINT + "/status")
    assert req["headers"]["Accept"] == "application/json"
    assert req["body"] is None


def test_list_long_adds_the_ids_heartbeat_work_and_agent():
    _cmd, _args, (columns, rows) = run(host.ListHost, _status(), ["--long"])
    assert columns[4:] == ("ID", "Heartbeat OK", "Busy", "Operator Disabled",
                           "Agent", "Retrying")
    assert list(rows)[0][4:] == ("s1", True, False, None, "agent beating",
                                 None)


def test_list_as_json_is_one_document_and_a_hold_goes_to_stderr():
    held = dict(STATUS, cluster={"ok": False, "reason": "storm: 2 of 3 "
                                 "hosts lost"})
    s = _status(held)
    cmd, args, _ = run(host.ListHost, s, ["-f", "json"])
    assert cmd.app.stderr.getvalue() == "HOLD: storm: 2 of 3 hosts lost\n"
    text = output(host.ListHost, s, ["-f", "json"])
    assert json.loads(text) == [
        {"Host": "compute1", "State": "active",
         "Since": "2026-11-18T11:06:40Z", "Reason": "heartbeating"},
        {"Host": "compute2", "State": "suspended",
         "Since": "2026-11-18T11:07:40Z", "Reason": "firmware"}]


def test_show_finds_a_host_by_name_or_service_id():
    for name in ("compute2", "s2"):
        _cmd, _args, (columns, values) = run(host.ShowHost, _status(), [name])
        shown = dict(zip(columns, values))
        assert shown["host"] == "compute2" and shown["id"] == "s2"
        assert shown["state"] == "suspended"
        assert shown["since"] == "2026-11-18T11:07:40Z"
        assert columns[:5] == ("host", "id", "state", "since", "reason")


def test_show_includes_the_work_running_as_structured_values():
    busy = {"hosts": [dict(STATUS["hosts"][0], busy=True,
                           work="drain: 1 of 2 moved",
                           servers=[{"id": "v1", "state": "moved"}])]}
    text = output(host.ShowHost, _status(busy), ["compute1", "-f", "json"])
    shown = json.loads(text)
    assert shown["work"] == "drain: 1 of 2 moved"
    assert shown["servers"] == [{"id": "v1", "state": "moved"}]


def test_show_of_an_unknown_host_names_the_known_ones():
    with pytest.raises(exceptions.CommandError) as err:
        run(host.ShowHost, _status(), ["compute9"])
    assert str(err.value) == ("instanceha: no host 'compute9' (known: "
                              "compute1, compute2)")


@pytest.mark.parametrize("status, body, text", [
    (403, {"error": "policy does not allow instanceha:status:read"},
     "instanceha: status refused (403): policy does not allow "
     "instanceha:status:read"),
    # keystonemiddleware's own refusal
    (401, {"error": {"code": 401, "title": "Unauthorized", "message":
                     "The request you have made requires authentication."}},
     "instanceha: status refused (401): The request you have made requires "
     "authentication."),
    (502, b"<html>Bad Gateway</html>",
     "instanceha: status refused (502): <html>Bad Gateway</html>"),
])
def test_a_refused_read_is_the_commands_error_with_the_apis_text(
        status, body, text):
    s = FakeSession({("GET", "/status"): [(status, body)]})
    with pytest.raises(exceptions.CommandError) as err:
        run(host.ListHost, s, [])
    assert str(err.value) == text


def test_an_unreachable_service_is_said():
    s = FakeSession({("GET", "/status"): ks_exc.ConnectFailure(
        "Unable to establish connection to %s/status" % ENDPOINT)})
    with pytest.raises(exceptions.CommandError) as err:
        run(host.ListHost, s, [])
    assert str(err.value).startswith(
        "instanceha: cannot reach the service at %s: Unable to establish "
        "connection" % ENDPOINT)


def test_keystone_refusing_the_user_is_said():
    s = FakeSession({("GET", "/status"): ks_exc.Unauthorized(
        "The request you have made requires authentication.")})
    with pytest.raises(exceptions.CommandError) as err:
        run(host.ListHost, s, [])
    assert str(err.value) == (
        "instanceha: request to %s failed: Unauthorized: The request you "
        "have made requires authentication. (HTTP 401)" % ENDPOINT)


SUSPENDED = {"host": "compute1", "command": "suspend", "state": "active",
             "still_running": None, "until": T0 + 3600}


def test_suspend_sends_how_long_and_shows_until_when():
    s = _post("/hosts/compute1/suspend", (202, SUSPENDED))
    _cmd, _args, (columns, values) = run(
        host.SuspendHost, s, ["compute1", "--seconds", "3600", "--reason",
                              "firmware"])
    assert s.requests[0]["body"] == {"reason": "firmware", "seconds": 3600.0}
    assert s.requests[0]["headers"]["Content-Type"] == "application/json"
    assert dict(zip(columns, values)) == {
        "host": "compute1", "command": "suspend", "state_before": "active",
        "until": "2026-11-18T12:06:40Z", "still_running": None}
    assert columns == ("host", "command", "state_before", "until",
                       "still_running")


def test_suspend_forever_says_forever():
    s = _post("/hosts/compute1/suspend", (202, dict(SUSPENDED, until=None)))
    _cmd, _args, (columns, values) = run(host.SuspendHost, s,
                                         ["compute1", "--forever"])
    assert s.requests[0]["body"] == {"reason": "by suspend", "forever": True}
    assert dict(zip(columns, values))["until"] == "forever"


@pytest.mark.parametrize("argv", [["compute1"],
                                  ["compute1", "--forever", "--seconds", "9"],
                                  ["compute1", "--seconds", "soon"]])
def test_suspend_needs_one_of_seconds_or_forever(argv, capsys):
    with pytest.raises(SystemExit) as exit_:
        run(host.SuspendHost, FakeSession(), argv)
    assert exit_.value.code == 2
    assert "--seconds" in capsys.readouterr().err


def test_the_apis_validation_is_the_error():
    # The limit is the service's ([api] max_suspend_seconds): only the
    # API knows it.
    s = _post("/hosts/compute1/suspend", (400, {
        "error": "bad request body: seconds must be at most 86400 ([api] "
                 "max_suspend_seconds), not 90000"}))
    with pytest.raises(exceptions.CommandError) as err:
        run(host.SuspendHost, s, ["compute1", "--seconds", "90000"])
    assert str(err.value) == (
        "instanceha: suspend refused (400): bad request body: seconds must "
        "be at most 86400 ([api] max_suspend_seconds), not 90000")


def test_a_host_name_is_one_path_segment():
    s = _post("/hosts/a%2Fb%20c/maintenance", (202, {
        "host": "a/b c", "command": "maintenance", "state": "active",
        "still_running": None}))
    run(host.MaintenanceHost, s, ["a/b c"])
    assert s.requests[0]["url"] == ENDPOINT + "/hosts/a%2Fb%20c/maintenance"


def test_a_command_the_state_does_not_allow_is_refused_with_the_apis_text():
    s = _post("/hosts/compute1/maintenance", (409, {
        "error": "maintenance does not apply to host compute1 in state "
                 "evacuating (only where no recovery is under way; suspend "
                 "stops a recovery)", "state": "evacuating"}))
    with pytest.raises(exceptions.CommandError) as err:
        run(host.MaintenanceHost, s, ["compute1"])
    assert str(err.value).startswith(
        "instanceha: maintenance refused (409): maintenance does not apply "
        "to host compute1 in state evacuating")


@pytest.mark.parametrize("flags, body", [
    ([], {"reason": "by resume"}),
    (["--fail-back"], {"reason": "by resume", "fail_back": True}),
    (["--no-fail-back", "--reason", "done"],
     {"reason": "done", "fail_back": False}),
])
def test_resume_sends_fail_back_only_when_given(flags, body):
    s = _post("/hosts/compute1/resume", (202, {
        "host": "compute1", "command": "resume", "state": "maintenance",
        "still_running": None}))
    _cmd, _args, (columns, values) = run(host.ResumeHost, s,
                                         ["compute1"] + flags)
    assert s.requests[0]["body"] == body
    assert dict(zip(columns, values))["state_before"] == "maintenance"


def test_resume_fail_back_and_no_fail_back_exclude_each_other():
    with pytest.raises(SystemExit):
        run(host.ResumeHost, FakeSession(),
            ["compute1", "--fail-back", "--no-fail-back"])


PLAN = {"ok": True, "proceed": True, "refusals": [],
        "steps": [{"id": "v1", "name": "web-1", "how": "live",
                   "why": ""},
                  {"id": "v2", "name": None, "how": "cold",
                   "why": "no shared storage"}],
        "summary": ["2 servers, 2 can move"]}


def test_drain_sends_its_options_and_shows_the_preflight():
    s = _post("/hosts/compute1/drain", (202, {
        "host": "compute1", "command": "drain", "state": "active",
        "still_running": None, "preflight": PLAN}))
    _cmd, _args, (columns, values) = run(
        host.DrainHost, s, ["compute1", "--then", "decommission",
                            "--concurrency", "3"])
    assert s.requests[0]["body"] == {
        "reason": "by drain", "then": "decommission", "force": False,
        "dry_run": False, "concurrency": 3}
    shown = dict(zip(columns, values))
    assert shown["preflight"] == "passed"
    assert shown["steps"].machine_readable() == ["live web-1",
                                    "cold v2 (no shared storage)"]
    # In a table, on one line (osc-lib's ListColumn sorts it).
    assert shown["steps"].human_readable() == \
        "cold v2 (no shared storage), live web-1"


def test_drain_dry_run_shows_the_plan_and_changes_nothing():
    s = _post("/hosts/compute1/drain", (200, {
        "host": "compute1", "command": "drain", "state": "active",
        "dry_run": True, "preflight": PLAN}))
    text = output(host.DrainHost, s, ["compute1", "--dry-run", "-f", "json"])
    shown = json.loads(text)
    assert s.requests[0]["body"]["dry_run"] is True
    assert shown["dry_run"] is True and shown["preflight"] == "passed"
    assert shown["summary"] == ["2 servers, 2 can move"]
    assert "still_running" not in shown


def test_a_refused_preflight_is_the_error_with_every_reason():
    s = _post("/hosts/compute1/drain", (409, {
        "host": "compute1", "command": "drain", "state": "active",
        "dry_run": False, "preflight": dict(PLAN, ok=False, proceed=False,
                                            refusals=["no room", "pinned"]),
        "error": "preflight refused: no room; pinned"}))
    with pytest.raises(exceptions.CommandError) as err:
        run(host.DrainHost, s, ["compute1"])
    assert str(err.value) == ("instanceha: drain refused (409): preflight "
                              "refused: no room; pinned")


def _entries(*markers):
    kinds = {"t": {"kind": "transition", "from": "active", "to": "suspect",
                   "event": "heartbeat_lost", "source": "reconciler",
                   "reason": "service down"},
             "a": {"kind": "action", "action": "fence", "outcome": "ok",
                   "finished_at": T0 + 3.5, "detail": "power off"},
             "e": {"kind": "evacuation", "server_id": "v1",
                   "status": "done", "dest_host": "compute2",
                   "finished_at": None, "detail": ""}}
    return [dict(kinds[m[0]], marker=m, at=T0,
                 time="2026-11-18T11:06:40.000Z") for m in markers]


def test_history_reads_every_page_in_time_order():
    s = FakeSession({("GET", "/hosts/compute1/history"): [
        (200, {"host": "compute1", "entries": _entries("t1", "a1"),
               "next_marker": "a1"}),
        (200, {"host": "compute1", "entries": _entries("e1"),
               "next_marker": None})]})
    _cmd, _args, (columns, rows) = run(
        host.HostHistory, s, ["compute1", "--since", "2h", "--long"])
    assert columns == ("Time", "Kind", "What", "Detail", "Marker")
    assert list(rows) == [
        ("2026-11-18T11:06:40.000Z", "transition", "active -> suspect",
         "heartbeat_lost from reconciler: service down", "t1"),
        ("2026-11-18T11:06:40.000Z", "action", "fence",
         "ok after 3.5 s: power off", "a1"),
        ("2026-11-18T11:06:40.000Z", "evacuation",
         "server v1: done -> compute2", "", "e1")]
    assert [r["query"] for r in s.requests] == [{"since": "2h"},
                                                {"since": "2h",
                                                 "marker": "a1"}]


def test_history_limit_stops_after_that_many():
    s = FakeSession({("GET", "/hosts/compute1/history"): [
        (200, {"host": "compute1", "entries": _entries("t1", "a1"),
               "next_marker": "a1"})]})
    _cmd, _args, (columns, rows) = run(host.HostHistory, s,
                                       ["compute1", "--limit", "2"])
    assert len(list(rows)) == 2 and len(s.requests) == 1
    assert s.requests[0]["query"] == {"limit": "2"}
    assert "Marker" not in columns


def test_history_of_an_unknown_host_or_a_bad_time_is_the_apis_refusal():
    s = FakeSession({("GET", "/hosts/compute9/history"): [
        (404, {"error": "unknown host 'compute9'"})]})
    with pytest.raises(exceptions.CommandError) as err:
        run(host.HostHistory, s, ["compute9"])
    assert str(err.value) == ("instanceha: history refused (404): unknown "
                              "host 'compute9'")


def test_list_says_a_stale_view_first_and_exits_non_zero():
    """Issue 35, part 1: the API's engine has not passed for long: the
    table is shown (what it last knew) under a STALE line, exit 1."""
    stale = dict(STATUS, live={"ok": False, "reason": "the reconciler's "
                               "last pass was 300s ago"})
    cmd, args, _ = run(host.ListHost, _status(stale), [])
    assert cmd.run(args) == 1
    assert cmd.app.stderr.getvalue().startswith(
        "STALE: the reconciler's last pass was 300s ago\n")
    live = dict(STATUS, live={"ok": True, "reason": "reconciler passed"})
    cmd, args, _ = run(host.ListHost, _status(live), [])
    assert cmd.run(args) == 0 and cmd.app.stderr.getvalue() == ""
