"""FactReader: systemd answers cached per facts_interval and asked off the
beat's thread, pid files, libvirt guest counts, unknown on failures."""

import os
import subprocess

import pytest

from instanceha.agent import facts
from instanceha.heartbeat import protocol
from tests.unit.agent import helpers

try:
    import libvirt
except ImportError:
    libvirt = None

SHOW = ("LoadState=not-found\nActiveState=inactive\n\n"
        "ActiveState=active\nLoadState=loaded\n\n"
        "LoadState=not-found\nActiveState=inactive\n\n"
        "LoadState=loaded\nActiveState=failed\n\n"
        "LoadState=not-found\nActiveState=inactive\n")


class Libvirt:
    def __init__(self, count=4, error=None):
        self.count = count
        self.error = error
        self.opened = []

    def openReadOnly(self, uri):
        self.opened.append(uri)
        if self.error:
            raise self.error
        return self

    def numOfDomains(self):
        return self.count

    def close(self):
        pass


class Deferred:
    """spawn that keeps the refresh until run() is called."""

    def __init__(self):
        self.pending = []

    def __call__(self, target):
        self.pending.append(target)

    def run(self):
        while self.pending:
            self.pending.pop(0)()


def make(clock=None, runner=None, lib=None, spawn=None, **overrides):
    overrides.setdefault("compute_units", ["a.service", "nova.service",
                                           "c.service"])
    overrides.setdefault("libvirt_units", ["libvirtd.service",
                                           "virtqemud.service"])
    conf = helpers.make_conf(**overrides)
    return facts.FactReader(conf, clock=clock or helpers.Clock(),
                            run=runner or helpers.Runner(stdout=SHOW),
                            libvirt_module=lib or Libvirt(),
                            spawn=spawn or facts._inline)


def test_systemd_and_libvirt_answers():
    runner = helpers.Runner(stdout=SHOW)
    reader = make(runner=runner)
    assert reader.read() == protocol.Facts(compute=True, libvirt=False,
                                           guests=4)
    # One systemctl process for both daemons.
    (cmd, kwargs), = runner.calls
    assert cmd[:3] == ["systemctl", "show",
                       "--property=LoadState,ActiveState"]
    assert cmd[-5:] == ["a.service", "nova.service", "c.service",
                        "libvirtd.service", "virtqemud.service"]
    assert kwargs["timeout"] == 2.0
    assert reader.compute_unit == "nova.service"


def test_answers_are_reused_for_facts_interval():
    clock = helpers.Clock()
    runner = helpers.Runner(stdout=SHOW)
    reader = make(clock=clock, runner=runner, facts_interval=5.0)
    for _ in range(5):
        reader.read()
        clock.advance(1.0)
    assert len(runner.calls) == 1
    reader.read()
    assert len(runner.calls) == 2


def test_a_slow_refresh_never_holds_the_beat_and_ages_to_unknown():
    clock = helpers.Clock()
    deferred = Deferred()
    reader = make(clock=clock, spawn=deferred, facts_interval=5.0)
    # Nothing answered yet: unknown, and one refresh asked for.
    assert reader.read() == protocol.UNKNOWN_FACTS
    assert reader.read() == protocol.UNKNOWN_FACTS
    assert len(deferred.pending) == 1
    deferred.run()
    assert reader.read().compute is True
    # The next refresh hangs: the old answer serves until it is 15 s old.
    clock.advance(6.0)
    reader.read()
    assert len(deferred.pending) == 1
    clock.advance(8.0)
    assert reader.read().compute is True
    clock.advance(2.0)
    assert reader.read() == protocol.UNKNOWN_FACTS
    assert len(deferred.pending) == 1          # never two at once


@pytest.mark.parametrize("runner", [
    helpers.Runner(returncode=1, stderr="System has not been booted"),
    helpers.Runner(raises=subprocess.TimeoutExpired(["systemctl"], 2)),
    helpers.Runner(raises=FileNotFoundError("systemctl")),
])
def test_systemctl_failing_is_unknown(runner):
    assert make(runner=runner).read() == protocol.Facts(None, None, 4)


def test_no_loaded_unit_is_unknown():
    show = "LoadState=not-found\nActiveState=inactive\n\n" * 5
    reader = make(runner=helpers.Runner(stdout=show))
    assert reader.read() == protocol.Facts(None, None, 4)
    assert reader.compute_unit == "a.service"


@pytest.mark.parametrize("state,running", [
    ("active", True), ("reloading", True), ("activating", False),
    ("deactivating", False), ("inactive", False), ("failed", False)])
def test_active_states(state, running):
    show = "LoadState=loaded\nActiveState=%s\n" % state
    reader = make(runner=helpers.Runner(stdout=show),
                  compute_units=["n.service"], libvirt_check="none")
    assert reader.read().compute is running


def test_pid_files(tmp_path):
    alive = tmp_path / "alive.pid"
    alive.write_text("%d\n" % os.getpid())
    dead = tmp_path / "dead.pid"
    child = subprocess.Popen(["true"])
    child.wait()
    dead.write_text(str(child.pid))
    junk = tmp_path / "junk.pid"
    junk.write_text("nope")
    assert facts.pid_alive(alive) is True
    assert facts.pid_alive(dead) is False
    assert facts.pid_alive(tmp_path / "missing.pid") is False
    assert facts.pid_alive(junk) is None
    runner = helpers.Runner(stdout=SHOW)
    reader = make(runner=runner, compute_check="pidfile",
                  compute_pidfile=str(alive), libvirt_check="pidfile",
                  libvirt_pidfile=str(dead))
    assert reader.read() == protocol.Facts(True, False, 4)
    assert runner.calls == []           # no systemctl for pid files


def test_guests_unknown_without_libvirt_or_when_it_fails():
    assert make(lib=Libvirt(error=RuntimeError("no socket"))).read() \
        .guests is None
    reader = facts.FactReader(helpers.make_conf(compute_check="none",
                                                libvirt_check="none"),
                              libvirt_module=None, spawn=facts._inline)
    assert reader.read() == protocol.UNKNOWN_FACTS
    assert make(count_guests=False).read().guests is None


def test_the_uri_is_configurable():
    lib = Libvirt()
    make(lib=lib, libvirt_uri="test:///default").read()
    assert lib.opened == ["test:///default"]


def test_read_facts_once():
    got = facts.read_facts(helpers.make_conf(compute_check="none",
                                             libvirt_check="none"),
                           libvirt_module=Libvirt(count=2))
    assert got == protocol.Facts(None, None, 2)


@pytest.mark.skipif(libvirt is None, reason="python3-libvirt not importable")
def test_libvirt_test_driver():
    conf = helpers.make_conf(compute_check="none", libvirt_check="none",
                             libvirt_uri="test:///default")
    assert facts.read_facts(conf).guests == 1   # the test driver's domain


# -- the machine's system UUID (DMI product_uuid) ---------------------------

DMI = "4C4C4544-0042-3510-8052-B4C04F4E3232\n"      # as the kernel shows it


def test_the_system_uuid_is_read_from_the_configured_file(tmp_path):
    path = tmp_path / "product_uuid"
    path.write_text(DMI)
    reader = make(system_uuid_file=str(path))
    assert reader.read().system_uuid == \
        "4c4c4544-0042-3510-8052-b4c04f4e3232"
    path.unlink()                       # read once, then kept
    assert reader.read().system_uuid == \
        "4c4c4544-0042-3510-8052-b4c04f4e3232"


def test_an_unreadable_system_uuid_is_unknown_and_tried_again(tmp_path):
    path = tmp_path / "product_uuid"
    clock = helpers.Clock()
    reader = make(clock=clock, system_uuid_file=str(path))
    assert reader.read().system_uuid is None
    path.write_text(DMI)
    assert reader.read().system_uuid is None     # not before an interval
    clock.advance(10)
    assert reader.read().system_uuid == \
        "4c4c4544-0042-3510-8052-b4c04f4e3232"


@pytest.mark.parametrize("text", ["", "Not Settable", "0" * 32,
                                  "00000000-0000-0000-0000-000000000000"])
def test_a_placeholder_system_uuid_is_unknown(tmp_path, text):
    path = tmp_path / "product_uuid"
    path.write_text(text + "\n")
    assert make(system_uuid_file=str(path)).read().system_uuid is None


def test_no_system_uuid_file_sends_none():
    assert make(system_uuid_file="").read().system_uuid is None
