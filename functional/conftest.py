"""Hooks for every functional suite."""

import os
import pathlib
import sys

import pytest

REPO = pathlib.Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from functional.peers import harness  # noqa: E402

# No functional test may arm this machine's watchdog: the agent refuses
# /dev/ paths and character devices while this is set (here and in every
# process a test starts).
os.environ["INSTANCEHA_NO_REAL_WATCHDOG"] = "1"


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_teardown(item, nextitem):
    yield                      # fixtures (restore) run first
    harness.leaving(nextitem)  # stops the real-peer bed when its suites end


def pytest_sessionfinish(session, exitstatus):
    harness.stop()


# -- long variants ------------------------------------------------------------
#
# ``@pytest.mark.long``: a test whose ground another test in the CI run
# already covers (on the simulator, or on real Nova in a shorter form). It
# runs with INSTANCEHA_LONG_TESTS=1 and is left out of the collection (not
# skipped) otherwise, so that CI stays within its time.

LONG = __import__("os").environ.get("INSTANCEHA_LONG_TESTS") == "1"


def pytest_configure(config):
    config.addinivalue_line(
        "markers", "long: runs only with INSTANCEHA_LONG_TESTS=1 (doc/"
        "functional-testing.md); a shorter variant runs in CI")
    config.addinivalue_line(
        "markers", "allows_unsafe_evacuation(reason): the test sends (or "
        "lets the engine send) evacuate requests for servers whose host is "
        "powered on, on purpose; the invariant check reports them without "
        "failing it. Use sparingly, with the reason")


def pytest_collection_modifyitems(config, items):
    for item in items:
        reason = _unsafe_by_design(item)
        if reason and not item.get_closest_marker("allows_unsafe_evacuation"):
            item.add_marker(pytest.mark.allows_unsafe_evacuation(reason))
    if LONG:
        return
    left = [i for i in items if i.get_closest_marker("long")]
    if left:
        config.hook.pytest_deselected(items=left)
        items[:] = [i for i in items if not i.get_closest_marker("long")]


@pytest.fixture(scope="module")
def vhost():
    """A RabbitMQ vhost of the test module's own on the machine's broker."""
    from functional import events_fixtures as fx
    with fx.RabbitVhost() as v:
        yield v


#: test directories on the shared real-peer bed (functional/peers/harness.py)
BED_DIRS = tuple("functional/%s/" % suite.name for suite in harness.SUITES)
#: The real-peer tests are run on two beds, each by one worker: these
#: files on the second, the rest on the first (about half the time each:
#: one bed's tests alone took 19 of the suite's 20 minutes). Files that
#: restart Nova in another auth mode (Keystone) stay on one bed together.
SECOND_BED = tuple("functional/realnova/%s.py" % name for name in (
    "test_drain", "test_fence_agent", "test_fencing_drivers", "test_resume",
    "test_safety", "test_scenarios"))


def bed_unit(nodeid):
    """The work unit of a test: one per real-peer bed for the tests on it
    (see :data:`SECOND_BED`), the test itself for every other."""
    if nodeid.startswith(SECOND_BED):
        return "realpeer-bed-2"
    return "realpeer-bed-1" if nodeid.startswith(BED_DIRS) else nodeid


def pytest_xdist_make_scheduler(config, log):
    """With pytest-xdist (``./tools/test`` runs four workers): the tests
    on each real-peer bed in one work unit, so one worker runs them, in
    collection order, on its bed started once (two beds, two workers);
    every other test is a unit of its own, spread over the workers. A
    worker takes a new unit only when it has at most two tests left, so
    the two beds' units go to two workers. (xdist's own ``loadgroup``
    marks no longer group anything under pytest 9: it renames nodeids
    through an attribute pytest 9 does not read.)"""
    from xdist.scheduler import LoadScopeScheduling

    class BedScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid):
            return bed_unit(nodeid)

    return BedScheduling(config, log)


# -- no secret in a log or status file -----------------------------------------
#
# Every functional test that runs instanceha writes its configuration into its
# own directory (instanceha.conf, clouds.yaml, the BMC inventory, password
# files, kubeconfigs): the secrets it configured are read back from there
# (passwords, tokens, the passwords in transport and database URLs), and every
# instanceha log (instanceha*.log) and status file (status*.json) in the same
# tree must hold none of them. Per test over its tmp_path (after its fixtures
# stopped the engine), and once at the end of the session over the whole
# base temp directory (module-scoped beds). Reads only small text files.

import functools  # noqa: E402
import os  # noqa: E402
import re  # noqa: E402

_SECRET_NAME = re.compile(r"pass(word|wd)?$|secret|token|credential", re.I)
_URL_PASSWORD = re.compile(r"://[^:/@\s]*:([^@\s]+)@")
_CONFIG_FILE = re.compile(r".*\.(conf|ya?ml|pass|kubeconfig)$|kubeconfig$")
_OUTPUT_FILE = re.compile(r"instanceha.*\.log$|status.*\.json$")
_MAX_READ = 8 * 1024 * 1024


def _walk_strings(value, name=""):
    if isinstance(value, dict):
        for k, v in value.items():
            yield from _walk_strings(v, str(k))
    elif isinstance(value, list):
        for v in value:
            yield from _walk_strings(v, name)
    elif isinstance(value, (str, int)) and not isinstance(value, bool):
        yield name, str(value)


def _secrets_in(path):
    """(secrets, plain values) a configuration file holds."""
    import yaml
    secrets, plain = set(), set()
    try:
        with open(path, errors="replace") as f:
            text = f.read(_MAX_READ)
    except OSError:
        return secrets, plain
    secrets.update(_URL_PASSWORD.findall(text))
    if path.endswith(".pass"):
        secrets.add(text.strip())
        return secrets, plain
    if path.endswith(".conf"):
        pairs = [line.split("=", 1) for line in text.splitlines()
                 if "=" in line and not line.lstrip().startswith("#")]
        pairs = [(k.strip(), v.strip()) for k, v in pairs]
    else:
        try:
            pairs = list(_walk_strings(yaml.safe_load(text)))
        except Exception:   # noqa: BLE001 - not ours to judge
            pairs = []
    for key, value in pairs:
        if key == "password_file":
            full = os.path.join(os.path.dirname(path), value)
            try:
                with open(full, errors="replace") as f:
                    secrets.add(f.read(4096).strip())
            except OSError:
                pass
        elif _SECRET_NAME.search(key) and not key.endswith(("_file",
                                                            "_env")):
            secrets.add(value)
        else:
            plain.add(value)
    return secrets, plain


def _files(top, pattern):
    for dirpath, _, names in os.walk(top):
        for name in names:
            if pattern.match(name):
                yield os.path.join(dirpath, name)


@functools.lru_cache(maxsize=None)
def _pattern(secret):
    # A short secret ("secret", the simulator's default) only as a whole
    # word, so that words such as secret_file_readable do not count.
    if len(secret) >= 8:
        return re.compile(re.escape(secret))
    return re.compile(r"(?<![\w-])%s(?![\w-])" % re.escape(secret))


def secret_leaks(top):
    """[(file, secret)] for every configured secret found in an instanceha
    log or status file under ``top``."""
    secrets, plain = set(), set()
    for path in _files(top, _CONFIG_FILE):
        s, p = _secrets_in(path)
        secrets |= s
        plain |= p
    # too short to tell, or also configured as a plain value (a user name)
    secrets = {s for s in secrets if len(s) >= 4 and s not in plain}
    leaks = []
    for path in _files(top, _OUTPUT_FILE) if secrets else ():
        try:
            with open(path, errors="replace") as f:
                text = f.read(_MAX_READ)
        except OSError:
            continue
        leaks += [(path, s) for s in sorted(secrets)
                  if _pattern(s).search(text)]
    return leaks


def _fail_on_leaks(top, what):
    leaks = secret_leaks(str(top))
    if leaks:
        pytest.fail("%s: a configured secret is in an instanceha log or "
                    "status file: %s" % (what, "; ".join(
                        "%s holds %s...%s" % (p, s[:2], s[-1:])
                        for p, s in leaks)), pytrace=False)


@pytest.fixture(autouse=True)
def no_secret_in_test_output(request):
    """After a test that has a tmp_path (and its fixtures stopped what they
    started), no secret it configured is in its logs or status files."""
    top = (request.getfixturevalue("tmp_path")
           if "tmp_path" in request.fixturenames else None)
    yield
    if top is not None:
        _fail_on_leaks(top, request.node.nodeid)


@pytest.fixture(scope="session", autouse=True)
def no_secret_in_session_output(tmp_path_factory):
    """The same over every directory the session made (module beds too),
    each with the secrets configured in it: a secret of one test that is
    an ordinary word ('shared') is not looked for in another's logs."""
    yield
    base = str(tmp_path_factory.getbasetemp())
    for name in sorted(os.listdir(base)):
        path = os.path.join(base, name)
        if os.path.isdir(path):
            _fail_on_leaks(path, "session")


# -- the invariant: no evacuate request while the source host is powered on ---
#
# Every evacuate request that reaches a Nova API a test talks to (any
# simulated cloud of this process: instanceha/sim; real nova-api on the
# real-peer bed: functional/peers/evacwatch.py) is published with the power
# state of the server's host at that instant (instanceha/sim/invariant.py).
# The session-wide ledger keeps them in order; after each test (and after
# its fixtures stopped what they started) the requests that arrived since
# the previous test's check are that test's: one whose host was not Off
# fails it, naming server, host, time and power state. A module-scoped
# fixture's requests count for the test whose set-up or teardown ran it
# (the first test of the module, or the next test); what is left when the
# session ends fails the session.

import threading  # noqa: E402

from instanceha.sim import invariant  # noqa: E402

#: tests that evacuate a powered-on host on purpose, where the marker cannot
#: sit on the test itself: "path::name" (relative to the repository, name
#: without parameters) -> why
UNSAFE_BY_DESIGN = {
    "functional/sim/test_nova_driver.py::"
    "test_services_servers_and_evacuation_rules":
        "drives the Nova driver alone: Nova's answer to an evacuation from "
        "a host whose compute is up (refused), then from one whose compute "
        "is killed and forced down (no BMC involved)",
    "functional/sim/test_nova_driver.py::"
    "test_lists_follow_novas_pages":
        "drives the Nova driver alone: evacuates a killed, forced-down "
        "host's servers to page through os-migrations (no BMC involved)",
    "functional/sim/test_nova_driver.py::"
    "test_evacuate_to_a_named_host_goes_through_the_scheduler":
        "drives the Nova driver alone: evacuation to a named host from a "
        "killed, forced-down host (no BMC involved)",
    "functional/sim/test_power_state.py::"
    "test_nova_driver_evacuates_at_the_microversion_asked":
        "drives the Nova driver alone: the server's state after evacuation "
        "at each microversion, from a killed, forced-down host (no BMC "
        "involved)",
    "functional/test_events_e2e.py::"
    "test_kdump_evacuate_opt_in_skips_power_off":
        "[kdump] action = evacuate, the operator's explicit opt-in for a "
        "trusted kdump network: a host whose kernel crashed is evacuated "
        "while it dumps, powered on (doc/safety.md rule 2)",
    "functional/devstack/test_plugin.py::"
    "test_every_phase_then_a_host_failure_is_recovered":
        "DevStack's default single-node set-up fences with the noop driver "
        "([fencing] allow_unfenced): the test asserts the host stays on",
}


def _unsafe_by_design(item):
    try:
        rel = pathlib.Path(str(item.fspath)).resolve().relative_to(REPO)
    except ValueError:
        return None
    name = getattr(item, "originalname", None) or item.name
    return UNSAFE_BY_DESIGN.get("%s::%s" % (rel.as_posix(), name))


class EvacuateLedger:
    """Every evacuate request published in this process, in order, and
    how far the per-test checks have read."""

    def __init__(self):
        self._lock = threading.Lock()
        self.records = []
        self._read = 0

    def __call__(self, record):
        with self._lock:
            self.records.append(record)

    def unread(self):
        """The requests since the last :meth:`take` (left unread)."""
        with self._lock:
            return self.records[self._read:]

    def take(self):
        """The requests since the last take; they are now read."""
        with self._lock:
            new, self._read = self.records[self._read:], len(self.records)
            return new


def invariant_failure(records, nodeid, allowed=None):
    """The message failing test ``nodeid`` for ``records`` (the evacuate
    requests that arrived during it), or None when none was unsafe or the
    test is marked ``allows_unsafe_evacuation`` (``allowed``: its reason)."""
    text = invariant.report(records)
    if not text or allowed is not None:
        return None
    return "%s: invariant broken: %s" % (nodeid, text)


_LEDGER = EvacuateLedger()


@pytest.fixture(scope="session", autouse=True)
def evacuate_ledger():
    """Subscribes for the whole session; what no test's check read by the
    end (a module fixture's teardown after its last test) fails the
    session."""
    invariant.subscribe(_LEDGER)
    yield _LEDGER
    invariant.unsubscribe(_LEDGER)
    failure = invariant_failure(_LEDGER.take(), "session end")
    if failure:
        pytest.fail(failure, pytrace=False)


@pytest.fixture(autouse=True)
def no_evacuation_while_powered_on(request, evacuate_ledger):
    """After the test and its fixtures: no evacuate request reached Nova
    for a server whose host was not powered off (see above)."""
    yield
    marker = request.node.get_closest_marker("allows_unsafe_evacuation")
    allowed = None
    if marker is not None:
        allowed = (marker.args[0] if marker.args
                   else marker.kwargs.get("reason", ""))
    records = evacuate_ledger.take()
    failure = invariant_failure(records, request.node.nodeid, allowed)
    if failure:
        pytest.fail(failure, pytrace=False)
    if allowed is not None and invariant.unsafe(records):
        request.node.user_properties.append(
            ("unsafe_evacuations_allowed", invariant.report(records)))
