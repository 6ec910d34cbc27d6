"""GET /hosts/<host>/history and ``instanceha history HOST``: a host's
journal (transitions, actions, evacuations) in time order, a page at a
time."""

import json

import pytest

from instanceha.api import history as history_mod
from instanceha.api.server import OperatorAPI
from instanceha.cmd import main as cli
from instanceha.journal import Journal
from tests.unit import test_engine


@pytest.fixture
def recovered(monkeypatch, tmp_path):
    """compute-0 lost and recovered, its journal in a file."""
    url = "sqlite:///%s" % (tmp_path / "journal.db")
    monkeypatch.setattr(test_engine, "Journal", lambda _url: Journal(url))
    w = test_engine.World()
    w.pass_()
    w.compute.kill("compute-0")
    w.until("compute-0", "evacuated", passes=300)
    api = OperatorAPI(w.conf, w.engine, w.clock)
    return w, api, url


def _page(api, host, **query):
    status, _, body = api.handle("GET", "/hosts/%s/history" % host,
                                 query={k: str(v) for k, v in query.items()})
    return status, json.loads(body)


def test_every_transition_action_and_move_in_time_order(recovered):
    w, api, _ = recovered
    status, page = _page(api, "compute-0", limit=1000)
    assert status == 200 and page["next_marker"] is None
    entries = page["entries"]
    assert page["host"] == "compute-0"
    times = [(e["at"], e["marker"]) for e in entries]
    assert [e["at"] for e in entries] == sorted(e["at"] for e in entries)
    moves = [(e["from"], e["to"]) for e in entries
             if e["kind"] == "transition"]
    for step in [("active", "suspect"), ("suspect", "fencing"),
                 ("fencing", "fenced"), ("fenced", "evacuating"),
                 ("evacuating", "evacuated")]:
        assert step in moves, moves
    actions = [e["action"] for e in entries if e["kind"] == "action"]
    assert "fence" in actions and "isolate" in actions
    evacuated = [e for e in entries if e["kind"] == "evacuation"]
    assert len({e["server_id"] for e in evacuated}) == 2, evacuated
    assert all(e["status"] == "done" and e["dest_host"] for e in evacuated)
    assert all(e["time"].endswith("Z") for e in entries)
    assert all(e["reason"] for e in entries if e["kind"] == "transition")
    # Exactly the journal's rows of this host.
    journal = w.journal
    host_id = page["host_id"]
    assert len(entries) == (len(journal.transitions(host_id))
                            + len(journal.actions(host_id))
                            + len(journal.evacuations(host_id)))
    assert len(set(times)) == len(times)


def test_pages_with_a_marker_cover_everything_once(recovered):
    w, api, _ = recovered
    _, whole = _page(api, "compute-0", limit=1000)
    seen, marker, pages = [], None, 0
    while True:
        query = {"limit": 3}
        if marker:
            query["marker"] = marker
        status, page = _page(api, "compute-0", **query)
        assert status == 200 and len(page["entries"]) <= 3
        seen.extend(page["entries"])
        pages += 1
        marker = page["next_marker"]
        if marker is None:
            break
    assert seen == whole["entries"]
    assert len(seen) > 9 and pages == -(-len(seen) // 3)


def test_since_and_until_bound_the_page(recovered):
    w, api, _ = recovered
    _, whole = _page(api, "compute-0", limit=1000)
    middle = whole["entries"][len(whole["entries"]) // 2]["at"]
    _, later = _page(api, "compute-0", limit=1000, since=middle)
    _, earlier = _page(api, "compute-0", limit=1000, until=middle)
    assert later["entries"] and earlier["entries"]
    assert all(e["at"] >= middle for e in later["entries"])
    assert all(e["at"] < middle for e in earlier["entries"])
    assert earlier["entries"] + later["entries"] == whole["entries"]
    _, iso = _page(api, "compute-0", limit=1000,
                   since=history_mod.iso(middle))
    assert iso["entries"] == later["entries"]


def test_bad_parameters_and_unknown_hosts(recovered):
    w, api, _ = recovered
    status, page = _page(api, "nope")
    assert status == 404 and page["error"] == "unknown host 'nope'"
    for query, says in [({"limit": 0}, "limit must be"),
                        ({"limit": "x"}, "limit must be"),
                        ({"limit": 100000}, "history_max_limit"),
                        ({"marker": "z1"}, "is not an entry's marker"),
                        ({"marker": "t999999"}, "is no entry of this host"),
                        ({"since": "yesterday"}, "since 'yesterday'"),
                        ({"until": "nan"}, "until must be finite")]:
        status, page = _page(api, "compute-0", **query)
        assert status == 400 and says in page["error"], (query, page)
    # A marker of another host's entry is refused, not used.
    assert api.handle("POST", "/hosts/compute-1/maintenance", b"{}")[0] \
        == 202
    w.drain()
    _, other = _page(api, "compute-1", limit=1)
    status, page = _page(api, "compute-0", marker=other["entries"][0][
        "marker"])
    assert status == 400


def test_a_host_only_the_journal_knows_has_a_history(recovered):
    w, api, _ = recovered
    w.engine.find = lambda name: None
    status, page = _page(api, "compute-0", limit=5)
    assert status == 200 and len(page["entries"]) == 5


def test_the_cli_prints_the_history_from_the_journal(recovered, tmp_path,
                                                     capsys):
    w, api, url = recovered
    path = tmp_path / "instanceha.conf"
    path.write_text("[journal]\nconnection = %s\n" % url)
    capsys.readouterr()
    assert cli.main(["history", "compute-0", "--config-file",
                     str(path)]) == 0
    lines = capsys.readouterr().out.splitlines()
    _, whole = _page(api, "compute-0", limit=1000)
    assert len(lines) == len(whole["entries"])
    assert any("active -> suspect" in line for line in lines)
    assert any(" fence " in line and "fence_ok after" in line
               for line in lines)
    assert any("evacuation" in line and ": done -> compute-" in line
               for line in lines)
    assert cli.main(["history", "compute-0", "--json", "--limit", "4",
                     "--config-file", str(path)]) == 0
    rows = [json.loads(line) for line in
            capsys.readouterr().out.splitlines()]
    assert rows == whole["entries"][:4]
    since = whole["entries"][-1]["at"]
    assert cli.main(["history", "compute-0", "--since", repr(since),
                     "--config-file", str(path)]) == 0
    assert len(capsys.readouterr().out.splitlines()) == sum(
        1 for e in whole["entries"] if e["at"] >= since)


def test_the_cli_names_an_unknown_host_and_a_bad_time(recovered, tmp_path,
                                                      capsys):
    w, api, url = recovered
    path = tmp_path / "instanceha.conf"
    path.write_text("[journal]\nconnection = %s\n" % url)
    assert cli.main(["history", "nope", "--config-file", str(path)]) == 1
    assert capsys.readouterr().err.strip() == \
        "instanceha: no host 'nope' in the journal"
    with pytest.raises(SystemExit) as exit_:
        cli.main(["history", "compute-0", "--since", "soon",
                  "--config-file", str(path)])
    assert exit_.value.code == 2
    assert "--since 'soon'" in capsys.readouterr().err


@pytest.mark.parametrize("text,expected", [
    ("2026-11-25T07:00:00Z", 1795590000.0),
    ("2026-11-25 07:00", 1795590000.0),
    ("1795590000.5", 1795590000.5),
    ("90s", 910.0), ("30m", -800.0), ("2h", 1000.0 - 7200)])
def test_times(text, expected):
    assert history_mod.parse_time(text, 1000.0) == expected
