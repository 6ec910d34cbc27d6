"""The agent's guest-event watcher on real libvirt (python3-libvirt, the
Debian package tools/test-packages.sh installs) with its in-process
``test:///default`` driver, sending over a real UDP socket to the
engine's heartbeat listener.

What the test driver can do to its domain (suspend, resume, destroy,
start, shutdown) produces real lifecycle events through libvirt's default
event loop; none of them is a guest breaking by itself, and none may
leave the agent. The test driver cannot crash a guest: the sending path
is driven with that domain and the real module's CRASHED constants
through the same callback libvirt calls.

The venv does not see Debian's packages: the module is loaded from its
directory through a private directory of links (nothing else of
dist-packages comes along). Missing: skipped, or failed under
INSTANCEHA_REQUIRE_SERVICES=1.
"""

import importlib
import os
import sys
import threading

import pytest

from functional.events_fixtures import missing
from functional.waiting import wait_for
from instanceha import conf as ih_conf
from instanceha.agent import guest_events
from instanceha.agent import sender as sender_mod
from instanceha.heartbeat import guest
from instanceha.sources import heartbeat
from tests.unit.agent.helpers import make_conf
from tests.unit.heartbeat import helpers

DIST = "/usr/lib/python3/dist-packages"
HOST = "compute-f"


@pytest.fixture(scope="module")
def libvirt(tmp_path_factory):
    if "libvirt" in sys.modules:
        yield sys.modules["libvirt"]
        return
    names = [n for n in (os.listdir(DIST) if os.path.isdir(DIST) else ())
             if n == "libvirt.py" or (n.startswith("libvirtmod.")
                                      and n.endswith(".so"))]
    if len(names) != 2:
        missing("python3-libvirt is needed for this test (Debian package "
                "python3-libvirt; tools/test-packages.sh installs it)")
    links = tmp_path_factory.mktemp("libvirt")
    for name in names:
        os.symlink(os.path.join(DIST, name), str(links / name))
    sys.path.insert(0, str(links))
    try:
        module = importlib.import_module("libvirt")
    except ImportError as e:
        missing("python3-libvirt does not load in this Python: %s" % e)
    finally:
        sys.path.remove(str(links))
    yield module
    # Other tests of this process see no libvirt, as before.
    sys.modules.pop("libvirt", None)


@pytest.fixture(scope="module")
def wired(libvirt):
    """(watcher, received guest events, the test domain): one watcher per
    process, as in the agent (libvirt's default event loop is registered
    and run once)."""
    received = []
    conf = ih_conf.make({"agent": {"listen_addresses": ["127.0.0.1:0"]}})
    src = heartbeat.HeartbeatSource(
        conf, lambda event: None, known_hosts=lambda: [("id-f", HOST)],
        keyring=helpers.KEYRING,
        guest_sink=lambda ev, at: received.append(ev))
    src.start()
    stop = threading.Event()
    try:
        port = src.bound[0][1]
        agent_conf = make_conf(engines=["127.0.0.1:%d" % port],
                               libvirt_uri="test:///default")
        sender = sender_mod.Sender(agent_conf, helpers.KEYRING, host=HOST,
                                   boot_id="boot-f")
        watcher = guest_events.GuestWatcher(
            agent_conf, helpers.KEYRING, HOST, "boot-f", sender.send_event,
            sender.sent_at, libvirt_module=libvirt)
        assert watcher.start(stop) is True
        rw = libvirt.open("test:///default")
        yield watcher, received, rw.lookupByName("test")
        rw.close()
        sender.close()
    finally:
        stop.set()
        src.stop()


def test_real_lifecycle_events_of_asked_for_changes_send_nothing(wired):
    watcher, received, dom = wired
    if not dom.isActive():
        dom.create()
    before, sent = watcher.ignored, watcher.sent
    heard = len(received)
    dom.suspend()                   # SUSPENDED/PAUSED
    dom.resume()                    # RESUMED
    dom.destroy()                   # STOPPED/DESTROYED: how Nova stops
    dom.create()                    # STARTED
    dom.shutdown()                  # STOPPED/SHUTDOWN
    dom.create()
    wait_for(lambda: watcher.ignored - before >= 6, 10,
             lambda: "6 lifecycle events, %d seen" % (
                 watcher.ignored - before))
    assert watcher.sent == sent and len(received) == heard


def test_a_crash_of_a_real_domain_reaches_the_engine(wired, libvirt):
    watcher, received, dom = wired
    del received[:]
    watcher.on_lifecycle(None, dom, libvirt.VIR_DOMAIN_EVENT_CRASHED,
                         libvirt.VIR_DOMAIN_EVENT_CRASHED_PANICKED, None)
    watcher.on_lifecycle(None, dom, libvirt.VIR_DOMAIN_EVENT_STOPPED,
                         libvirt.VIR_DOMAIN_EVENT_STOPPED_FAILED, None)
    wait_for(lambda: len(received) == 2, 10, "two guest events received")
    assert [(e.host, e.server, e.event, e.detail) for e in received] == [
        (HOST, dom.UUIDString(), guest.CRASHED, "panicked"),
        (HOST, dom.UUIDString(), guest.STOPPED, "failed")]
