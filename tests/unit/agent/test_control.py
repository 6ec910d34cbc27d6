"""Control: which requests restart nova-compute and which are refused
(with the reason logged), the rate limit, the agent's own policy, and the
UDP socket on loopback."""

import socket
import subprocess
import threading
import time

import pytest
import structlog.testing

from instanceha.agent import control
from instanceha.errors import ConfigError
from instanceha.heartbeat import keys
from instanceha.heartbeat import protocol
from tests.unit.agent import helpers
from tests.unit.heartbeat import helpers as hb

ON = dict(restart_compute=True, control_addresses=["127.0.0.1:0"])


class Inline:
    """spawn: run the restart at once, in this thread."""

    def __call__(self, target, *args):
        target(*args)


def make(runner=None, wall=None, mono=None, spawn=None, unit="n.service",
         **overrides):
    conf = helpers.make_conf(**overrides)
    return control.Control(conf, hb.KEYRING, "compute-1",
                           clock=wall or helpers.Clock(1000.0),
                           monotonic=mono or helpers.Clock(50.0),
                           runner=runner or helpers.Runner(),
                           unit_fn=lambda: unit, spawn=spawn or Inline())


def request(seq=1, sent_at=1000.0, key=hb.KEY, **fields):
    return protocol.encode_request(hb.request(seq=seq, sent_at=sent_at,
                                              **fields), key)


def test_an_authentic_request_restarts_nova_compute():
    runner = helpers.Runner()
    c = make(runner, **ON)
    with structlog.testing.capture_logs() as logs:
        assert c.handle(request(), "192.0.2.1:9") == "accepted"
    (cmd, kwargs), = runner.calls
    assert cmd == ["systemctl", "--no-block", "restart", "n.service"]
    assert kwargs["timeout"] == 30.0
    events = [e["event"] for e in logs]
    assert events == ["agent.restart_started", "agent.restart_done",
                      "agent.request_accepted"]
    assert logs[0]["origin"] == "request"
    assert c.attempts[0][1:3] == ("request", "done")


def test_refused_by_default_and_logged():
    runner = helpers.Runner()
    c = make(runner)
    with structlog.testing.capture_logs() as logs:
        assert c.handle(request()) == "disabled"
    assert runner.calls == []
    assert logs[0]["event"] == "agent.request_refused"
    assert logs[0]["reason"] == "disabled"
    assert logs[0]["asked_because"] == "nova-compute down, host alive"


@pytest.mark.parametrize("data,why", [
    (request(host="compute-2"), "wrong_host"),
    (request(kind="reboot"), "unknown_kind"),
    (request(key=keys.Key.from_secret(b"x" * 40)), "unknown_key"),
    (request()[:-1] + b"\0", "bad_signature"),
    (b"junk", "bad_magic"),
    (protocol.encode_beat(hb.beat(), hb.KEY), "not_a_request"),
    (request(sent_at=900.0), "stale"),
    (request(sent_at=1100.0), "stale"),
])
def test_refusals(data, why):
    runner = helpers.Runner()
    c = make(runner, **ON)
    assert c.handle(data) == why
    assert c.counts[why] == 1
    assert runner.calls == []


def test_a_replayed_request_is_refused():
    runner = helpers.Runner()
    c = make(runner, **ON)
    data = request(seq=7)
    assert c.handle(data) == "accepted"
    assert c.handle(data) == "replayed"
    assert c.handle(request(seq=6)) == "replayed"
    assert len(runner.calls) == 1


def test_the_previous_key_is_accepted_during_a_rotation():
    conf = helpers.make_conf(**ON)
    ring = keys.Keyring(hb.KEY, hb.OTHER_KEY)
    c = control.Control(conf, ring, "compute-1", clock=helpers.Clock(1000.0),
                        runner=helpers.Runner(), spawn=Inline())
    assert c.handle(request(key=hb.OTHER_KEY)) == "accepted"


def test_rate_limit_per_window():
    mono = helpers.Clock(0.0)
    runner = helpers.Runner()
    c = make(runner, mono=mono, restart_max=3, restart_window=3600.0, **ON)
    outcomes = []
    for seq in range(1, 6):
        outcomes.append(c.handle(request(seq=seq)))
        mono.advance(60.0)
    assert outcomes == ["accepted"] * 3 + ["rate_limited"] * 2
    mono.advance(3600.0 - 5 * 60.0)     # the first attempt leaves the window
    assert c.handle(request(seq=9)) == "accepted"
    assert len(runner.calls) == 4


def test_one_restart_at_a_time():
    held = []
    c = make(spawn=lambda target, *args: held.append((target, args)), **ON)
    assert c.handle(request(seq=1)) == "accepted"
    assert c.handle(request(seq=2)) == "busy"
    target, args = held.pop()
    target(*args)
    assert c.handle(request(seq=3)) == "accepted"


@pytest.mark.parametrize("runner,detail", [
    (helpers.Runner(returncode=1, stderr="Unit not found."),
     "exit status 1: Unit not found."),
    (helpers.Runner(raises=subprocess.TimeoutExpired(["x"], 30)),
     "timed out"),
    (helpers.Runner(raises=FileNotFoundError(2, "No such file")),
     "No such file"),
])
def test_a_failed_restart_is_logged_and_frees_the_slot(runner, detail):
    c = make(runner, **ON)
    with structlog.testing.capture_logs() as logs:
        assert c.handle(request(seq=1)) == "accepted"
    failed = [e for e in logs if e["event"] == "agent.restart_failed"]
    assert detail in failed[0]["error"]
    assert c.attempts[0][2] == "failed"
    assert c.handle(request(seq=2)) == "accepted"


def test_junk_is_logged_once_a_minute_per_reason():
    mono = helpers.Clock(0.0)
    c = make(mono=mono, **ON)
    with structlog.testing.capture_logs() as logs:
        for _ in range(100):
            c.handle(b"junk")
        mono.advance(61.0)
        c.handle(b"junk")
    assert [e["count"] for e in logs] == [1, 101]
    assert c.counts["bad_magic"] == 101


def test_logs_never_show_the_key():
    c = make(**ON)
    with structlog.testing.capture_logs() as logs:
        c.handle(request())
        c.handle(request(seq=2, key=hb.OTHER_KEY))
    assert "kkkk" not in repr(logs) and "oooo" not in repr(logs)


def test_self_restart_after_down_long_enough():
    mono = helpers.Clock(0.0)
    runner = helpers.Runner()
    c = make(runner, mono=mono, self_restart=True, self_restart_after=60.0)
    down = protocol.Facts(compute=False, libvirt=True, guests=1)
    up = protocol.Facts(compute=True, libvirt=True, guests=1)
    for _ in range(60):
        assert c.observe(down) is None
        mono.advance(1.0)
    assert c.observe(down) == "accepted"
    assert runner.calls[0][0][-1] == "n.service"
    # A full delay again before the next attempt.
    mono.advance(30.0)
    assert c.observe(down) is None
    # Back up: the count starts over.
    c.observe(up)
    mono.advance(100.0)
    assert c.observe(down) is None
    assert len(runner.calls) == 1


def test_unknown_is_not_down_and_self_restart_is_off_by_default():
    mono = helpers.Clock(0.0)
    runner = helpers.Runner()
    off = make(runner, mono=mono)
    on = make(runner, mono=mono, self_restart=True, self_restart_after=10.0)
    for _ in range(30):
        assert off.observe(protocol.Facts(False, True, 0)) is None
        assert on.observe(protocol.UNKNOWN_FACTS) is None
        mono.advance(1.0)
    assert runner.calls == []


def test_self_restarts_share_the_limit():
    mono = helpers.Clock(0.0)
    c = make(mono=mono, self_restart=True, self_restart_after=10.0,
             restart_max=1, **ON)
    assert c.handle(request()) == "accepted"
    down = protocol.Facts(False, True, 0)
    c.observe(down)
    mono.advance(10.0)
    assert c.observe(down) == "rate_limited"


def test_the_socket_on_loopback():
    runner = helpers.Runner()
    done = threading.Event()

    def spawn(target, *args):
        target(*args)
        done.set()

    conf = helpers.make_conf(**ON)
    c = control.Control(conf, hb.KEYRING, "compute-1", runner=runner,
                        spawn=spawn, unit_fn=lambda: "n.service")
    c.start()
    try:
        (address, port), = c.addresses
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.sendto(b"junk", (address, port))
            s.sendto(protocol.encode_request(
                hb.request(sent_at=time.time()), hb.KEY),
                (address, port))
        assert done.wait(10)
    finally:
        c.stop()
    assert runner.calls[0][0][-1] == "n.service"
    assert c.counts["bad_magic"] == 1 and c.counts["accepted"] == 1


def test_nothing_bound_without_addresses():
    c = make()
    c.start()
    assert c.addresses == []
    c.stop()


def test_an_address_that_cannot_be_bound_is_a_start_up_error():
    c = make(control_addresses=["192.0.2.250:7412"])
    with pytest.raises(ConfigError, match="192.0.2.250:7412: cannot bind"):
        c.start()
