"""One real-peer test bed per test process, shared by every suite.

``functional/realnova`` and ``functional/conformance`` both ask for it; only
one Nova stack ever runs (about 1.7 GiB). It is started on first use and
stopped by :func:`stop` (called from each suite's ``pytest_sessionfinish``)
or at interpreter exit.

Auth modes: the bed starts in ``noauth`` mode (Nova's API trusts every
request; fast) unless the first test to use it asks for ``keystone``. A
real Keystone (``peers/keystone.py``) joins the bed when a test asks for it
(``testbed(keystone=True)``, ~15 s); ``testbed(auth="keystone")`` also
restarts Nova's processes with keystonemiddleware in front of nova-api and
placement (no new databases), and ``testbed()`` (``auth="noauth"``) puts
them back. Suites keep the Keystone tests together so a run switches once.

``INSTANCEHA_REQUIRE_SERVICES=1``: a peer that is not installed or not
reachable fails the test. Without it such a test is skipped with the reason.
A peer that *is* there but fails to start is always an error.
"""

import atexit
import os
import pathlib
import tempfile
import time
import uuid

from functional.peers import bmclink, ipmi, keystone, nova, procs, redfish
from functional.peers.errors import PeerError, PeerMissing

REQUIRE = os.environ.get("INSTANCEHA_REQUIRE_SERVICES") == "1"
KEEP = os.environ.get("INSTANCEHA_KEEP_PEER_LOGS", "1") == "1"


def handle_missing(exc):
    """Skip (or fail under INSTANCEHA_REQUIRE_SERVICES=1) on a missing peer."""
    import pytest
    if REQUIRE:
        pytest.fail(str(exc), pytrace=False)
    pytest.skip(str(exc).splitlines()[0])


class TestBed:
    """Nova + one Redfish BMC per host, linked to the computes."""

    def __init__(self, workdir, auth="noauth"):
        self.workdir = pathlib.Path(workdir)
        self.run_id = uuid.uuid4().hex[:8]
        self.keystone = None
        self.cloud = nova.NovaCloud(self.workdir / "nova", run_id=self.run_id,
                                    auth="noauth")
        self._start_auth = auth
        self.hosts = self.cloud.hosts
        self.redfish = {}
        self.ipmi = {}
        self.link = None
        self.timings = {}

    @property
    def auth(self):
        """``noauth`` or ``keystone``: how nova-api and placement authenticate."""
        return self.cloud.auth

    def start(self):
        t0 = time.monotonic()
        if self._start_auth == "keystone":
            self.ensure_keystone()
            self.cloud.auth, self.cloud.keystone = "keystone", self.keystone
        self.cloud.start()
        self.redfish = redfish.start_bmcs(self.hosts, self.workdir / "bmc")
        self.link = bmclink.BMCLink(self.cloud, self.redfish).start()
        self.cloud.evacuations.power_of = self.power_state
        self.timings.update(self.cloud.timings, total=time.monotonic() - t0)
        return self

    def stop(self):
        if self.link:
            self.link.stop()
        for b in list(self.redfish.values()) + list(self.ipmi.values()):
            b.stop()
        self.cloud.stop()
        if self.keystone is not None:
            self.keystone.stop()

    # -- Keystone and the auth mode
    def ensure_keystone(self):
        """Start the bed's Keystone unless it runs; Nova's mode is kept."""
        if self.keystone is None:
            ks = keystone.Keystone(self.workdir / "keystone", self.run_id)
            try:
                ks.start()
            except BaseException:
                ks.stop()
                raise
            self.keystone = ks
            self.timings["keystone"] = ks.timings.get("ready")
        elif not self.keystone.running:
            self.keystone.restart()
        return self.keystone

    def use_auth(self, auth):
        """Put nova-api and placement in ``auth`` mode (restarting Nova's
        processes if it changes). Call on a clean cloud."""
        if auth == "keystone":
            self.ensure_keystone()
        if auth != self.cloud.auth:
            self.cloud.switch_auth(auth, self.keystone)
            self.timings["switch_to_" + auth] = \
                self.cloud.timings["switch_to_" + auth]
        return self

    # -- per-host BMC choice
    def use_ipmi(self, host):
        """Put ``host`` behind an ipmi_sim BMC instead of its Redfish one."""
        if host not in self.ipmi:
            self.ipmi[host] = ipmi.IPMIBMC(host, self.workdir / "bmc").start()
        self.link.replace(host, self.ipmi[host])
        return self.ipmi[host]

    def use_redfish(self, host):
        self.link.replace(host, self.redfish[host])
        return self.redfish[host]

    def bmc(self, host):
        """The host's BMC; a power command waits until the link has
        started or killed the compute for the previous power edge."""
        return self.link.linked(host)

    def power_state(self, host):
        """The host's power as the BMC linked to its compute reports it
        (the machine's truth on this bed, whatever an inventory says)."""
        return self.bmc(host).power_state()

    def inventory(self):
        return {"hosts": {h: self.bmc(h).inventory_entry() for h in self.hosts}}

    # -- back to a clean cloud between tests
    def restore(self, timeout=120):
        """Every BMC on and willing, every compute up, enabled, not forced
        down, no servers, no live migration held. Waits on Nova, so a test
        that broke it fails here."""
        self.cloud.release_live_migrations()
        for host in self.hosts:
            for b in (self.redfish.get(host), self.ipmi.get(host)):
                if b is None:
                    continue
                if isinstance(b, redfish.RedfishBMC) and b.refuse_power_off:
                    b.restart(refuse_power_off=False)
                if isinstance(b, ipmi.IPMIBMC):
                    b.refuse_power_off(False)
            self.use_redfish(host)
            if self.redfish[host].power_state() != "on":
                self.redfish[host].power_on()
        deadline = time.monotonic() + timeout
        procs.wait_until(lambda: all(self.bmc(h).power_state() == "on"
                                     for h in self.hosts), 20,
                         "all BMCs on", "redfish")
        for host in self.hosts:
            if not self.cloud.compute_running(host):
                self.cloud.start_compute(host)
        for host in self.hosts:
            procs.wait_until(lambda: self._reset_service(host),
                             max(5, deadline - time.monotonic()),
                             "back to enabled/up", "nova-compute-%s" % host,
                             self.cloud.log_of("nova-compute-%s" % host),
                             interval=1)
        # Nova bumps updated_at on our PUTs, so "up" right after a reset says
        # nothing about the compute process: wait for a real heartbeat (an
        # updated_at newer than the one our last write left).
        for host in self.hosts:
            seen = self.cloud.service(host)["updated_at"]
            procs.wait_until(
                lambda: (self.cloud.service(host)["updated_at"] != seen
                         and self.cloud.service(host)["state"] == "up"),
                max(5, deadline - time.monotonic()),
                "heartbeating after the reset", "nova-compute-%s" % host,
                self.cloud.log_of("nova-compute-%s" % host), interval=0.5)
        self.cloud.delete_all_servers()

    def _reset_service(self, host):
        svc = self.cloud.service(host)
        if svc["forced_down"]:
            resp = self.cloud.call("PUT", "/os-services/%s" % svc["id"],
                                   {"forced_down": False}, microversion="2.53",
                                   ok=None)
            if resp.status_code != 200:
                return False
            svc = self.cloud.service(host)
        # Enable only a compute Nova sees up: nova-api then asks it to drop
        # the COMPUTE_STATUS_DISABLED trait from its resource provider. One
        # enabled while seen down keeps the trait until its next periodic
        # resource update (60 s), and boots on it end in No valid host.
        if svc["state"] != "up":
            return False
        if svc["status"] != "enabled":
            self.cloud.call("PUT", "/os-services/%s" % svc["id"],
                            {"status": "enabled"}, microversion="2.53")
        return True


_BED = None
_FAILED = None


def testbed(auth="noauth", keystone=False):
    """The process's test bed, started on first use.

    ``auth``: the mode Nova must be in (``noauth``, ``keystone``; None:
    whichever it is in). ``keystone=True``: the bed's Keystone must run
    (``bed.keystone``), whatever Nova's mode."""
    global _BED, _FAILED
    if _FAILED is not None:
        raise _FAILED
    if _BED is None:
        base = pathlib.Path(os.environ.get("INSTANCEHA_PEER_DIR") or
                            tempfile.mkdtemp(prefix="instanceha-peers-"))
        bed = TestBed(base, auth=auth or "noauth")
        try:
            bed.start()
        except BaseException as e:
            bed.stop()
            _FAILED = e if isinstance(e, PeerError) else PeerError(
                "testbed", "start failed: %r" % e, base / "nova" / "logs" / "setup.log")
            raise _FAILED
        _BED = bed
        atexit.register(stop)
    try:
        if keystone:
            _BED.ensure_keystone()
        if auth is not None:
            _BED.use_auth(auth)
    except PeerMissing:
        raise
    except BaseException as e:
        # a half-switched bed is no use to anyone after this test
        bed, _BED = _BED, None
        bed.stop()
        _FAILED = e if isinstance(e, PeerError) else PeerError(
            "testbed", "switching to %s failed: %r" % (auth, e),
            bed.workdir / "nova" / "logs" / "setup.log")
        raise _FAILED
    return _BED


#: suites that use the test bed; it is stopped when the run leaves them, so
#: Nova's ~1.7 GiB and its periodic tasks do not weigh on later tests
SUITES = [pathlib.Path(__file__).resolve().parents[1] / d
          for d in ("realnova", "conformance")]


def testbed_or_missing(auth="noauth", keystone=False):
    """The test bed for a fixture; a missing peer skips or fails the test
    (INSTANCEHA_REQUIRE_SERVICES=1) with its name."""
    try:
        return testbed(auth=auth, keystone=keystone)
    except PeerMissing as e:
        handle_missing(e)


def leaving(nextitem):
    """Stop the test bed unless the next test also uses it."""
    if nextitem is not None:
        path = pathlib.Path(str(nextitem.fspath)).resolve()
        if any(suite in path.parents for suite in SUITES):
            return
    stop()


def stop():
    global _BED
    if _BED is not None:
        bed, _BED = _BED, None
        bed.stop()


__all__ = ["TestBed", "testbed", "stop", "handle_missing", "PeerError",
           "PeerMissing"]
