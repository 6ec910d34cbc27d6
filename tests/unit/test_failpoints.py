"""instanceha.failpoints: a point kills the process when armed, alone or
for one server (``<point>@<server id>``, the crash matrix of planned
work)."""

import signal

import pytest

from instanceha import failpoints


@pytest.fixture
def kills(monkeypatch):
    killed = []
    monkeypatch.setattr(failpoints.os, "kill",
                        lambda pid, sig: killed.append(sig))
    return killed


def _arm(monkeypatch, *points):
    monkeypatch.setattr(failpoints, "ARMED", frozenset(points))


def test_nothing_armed_kills_nothing(monkeypatch, kills):
    _arm(monkeypatch)
    failpoints.hit("before_drain_request:live_migrate", "s1")
    failpoints.hit("after_action:drain")
    assert kills == []


def test_a_point_armed_for_every_server(monkeypatch, kills):
    _arm(monkeypatch, "before_drain_request:live_migrate")
    failpoints.hit("after_drain_request:live_migrate", "s1")
    assert kills == []
    failpoints.hit("before_drain_request:live_migrate", "s1")
    assert kills == [signal.SIGKILL]


def test_a_point_armed_for_one_server(monkeypatch, kills):
    _arm(monkeypatch, "before_repair_request:start@s2")
    failpoints.hit("before_repair_request:start", "s1")
    failpoints.hit("before_repair_request:start")
    failpoints.hit("before_repair_request:rebuild", "s2")
    assert kills == []
    failpoints.hit("before_repair_request:start", "s2")
    assert kills == [signal.SIGKILL]
