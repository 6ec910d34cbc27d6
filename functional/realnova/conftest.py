"""Fixtures for the scenarios on real Nova (see doc/functional-testing.md)."""

import pytest

from functional.peers import harness
from functional.realnova.agents import HostAgents
from functional.realnova.engine import Engine


@pytest.fixture(scope="function")
def bed():
    """The shared real-peer test bed (started on first use)."""
    return harness.testbed_or_missing()


@pytest.fixture
def clean_bed(bed):
    """The shared test bed, restored to a clean cloud after the test."""
    try:
        yield bed
    finally:
        bed.restore()


@pytest.fixture(scope="function")
def keystone_bed():
    """The shared bed with nova-api and placement behind keystonemiddleware
    and the bed's real Keystone (``bed.keystone``); restored after the test.
    Switching a running bed restarts Nova's processes once: the Keystone
    tests run together, after the bed's other tests."""
    bed = harness.testbed_or_missing(auth="keystone")
    try:
        yield bed
    finally:
        bed.restore()


@pytest.fixture(scope="function")
def keystone():
    """The bed's real Keystone (``Keystone``: ``token(user, password,
    project)``, ``admin_credentials``, ``credentials(user)``, ``url``),
    started on first use; Nova's auth mode is left as it is."""
    return harness.testbed_or_missing(auth=None, keystone=True).keystone


def _engines(bed, request):
    engines = []
    base = bed.workdir / "engines" / request.node.name

    def make(overrides=None, auth=None):
        e = Engine(bed, base / ("engine%d" % len(engines)), overrides, auth)
        engines.append(e)
        return e

    return make, engines


@pytest.fixture
def engine(clean_bed, request):
    """make(overrides) -> a real ``instanceha run`` on the bed, stopped
    after the test; kept with the peers' logs (pytest's tmp dirs are
    rotated by other runs)."""
    make, engines = _engines(clean_bed, request)
    yield make
    for e in engines:
        e.stop()


@pytest.fixture
def agents(clean_bed, request):
    """make(restart_compute=False, interval=1.0) -> HostAgents: a real
    ``instanceha-agent`` process per compute host (started by its
    ``start()``), configured to beat to the engine whose ``[agent]`` group
    ``engine_overrides()`` gives; stopped after the test. Ask for it
    before ``engine`` so the agents outlive the engine."""
    made = []
    base = clean_bed.workdir / "agents" / request.node.name

    def make(**kwargs):
        hosts = HostAgents(clean_bed, base / ("set%d" % len(made)), **kwargs)
        made.append(hosts)
        return hosts

    yield make
    for hosts in made:
        hosts.stop()


@pytest.fixture
def keystone_engine(keystone_bed, request):
    """make(overrides, auth) -> a real ``instanceha run`` authenticating
    through the bed's Keystone (``auth``: clouds.yaml ``auth_type`` and
    ``auth``; default the ``instanceha`` user's password)."""
    make, engines = _engines(keystone_bed, request)
    yield make
    for e in engines:
        e.stop()



def pytest_collection_modifyitems(session, config, items):
    """The cascade scenario runs last on the shared bed (right after the
    bed's other tests, so the bed is not started twice): it kills two of
    the three computes and leaves the most to restore. The tests on the
    Keystone-mode bed (fixture ``keystone_bed``) follow it, so the bed
    switches to Keystone mode once, at the end."""
    last = [i for i in items if "realnova/test_cascade.py" in i.nodeid]
    last += [i for i in items if i not in last and "keystone_bed" in
             getattr(i, "fixturenames", ())]
    if not last:
        return
    rest = [i for i in items if i not in last]
    on_bed = [n for n, i in enumerate(rest)
              if "/realnova/" in i.nodeid or "/conformance/" in i.nodeid
              or i.nodeid.startswith(("realnova/", "conformance/"))]
    at = on_bed[-1] + 1 if on_bed else len(rest)
    items[:] = rest[:at] + last + rest[at:]
