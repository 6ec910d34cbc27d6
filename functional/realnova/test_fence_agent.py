"""The fence_agent driver running the REAL ClusterLabs agents (Debian's
fence-agents: ``fence_ipmilan``, ``fence_redfish``) against the real BMC
peers: OpenIPMI's ``ipmi_sim`` and sushy-tools' Redfish emulator.

Only the BMC peers are started (not the Nova bed): what is asserted is the
power state the peers hold, and the FenceError the driver raises. A missing
agent skips, or fails naming it under INSTANCEHA_REQUIRE_SERVICES=1.

The agents' own ``power_timeout`` (how long ``action=off`` waits for Off;
20 s by default) is set to a few seconds in these entries, to keep the
refusal cases short.
"""

import socket
import time

import pytest

from instanceha import conf as iha_conf
from instanceha.drivers import fencing
from instanceha.drivers.fencing import base, fence_agent, inventory, load_driver
from functional.peers import harness, ipmi, procs, redfish
from functional.peers.errors import PeerMissing

HOST = "compute-fa"
#: tricky for the agents' stdin parser: blanks at the end, quotes, '=', '#'
REDFISH_PASSWORD = '"p=w#1 x" '


def need_agent(name):
    path = fence_agent.find_agent(name, fence_agent.DEFAULT_SEARCH_PATH)
    if path is None:
        harness.handle_missing(PeerMissing(
            name, "fence agent %s is not installed (tools/realpeers/"
            "install.sh installs Debian's fence-agents)" % name))
    return path


def started(make):
    try:
        return make()
    except PeerMissing as e:
        harness.handle_missing(e)


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    return tmp_path_factory.mktemp("fence-agent")


@pytest.fixture(scope="module")
def ipmi_bmc(workdir):
    bmc = started(lambda: ipmi.IPMIBMC(HOST, workdir).start())
    yield bmc
    bmc.stop()


@pytest.fixture(scope="module")
def redfish_bmc(workdir):
    bmc = started(lambda: redfish.RedfishBMC(
        HOST, workdir, password=REDFISH_PASSWORD).start())
    yield bmc
    bmc.stop()


@pytest.fixture(scope="module")
def refusing_redfish_bmc(workdir):
    bmc = started(lambda: redfish.RedfishBMC(
        HOST + "-refusing", workdir, refuse_power_off=True).start())
    yield bmc
    bmc.stop()


@pytest.fixture
def conf():
    return iha_conf.make({"fencing": {"timeout": 20, "poll_interval": 0.2,
                                      "retries": 2}})


@pytest.fixture
def driver(conf):
    return load_driver("fence_agent", conf)


def entry(agent, address, username, password, **params):
    data = {"hosts": {HOST: {
        "driver": "fence_agent", "agent": agent, "address": address,
        "username": username, "password": password, "agent_timeout": 30,
        "params": params}}}
    return inventory.parse(data, fencing.FIELDS)[HOST]


def ipmi_entry(bmc, password=None, port=None, **params):
    need_agent("fence_ipmilan")
    params = dict({"lanplus": 1, "cipher": 3, "ipport": port or bmc.port,
                   "power_timeout": 3}, **params)
    return entry("fence_ipmilan", "127.0.0.1", bmc.username,
                 password or bmc.password, **params)


def redfish_entry(bmc, password=None, port=None, **params):
    need_agent("fence_redfish")
    params = dict({"ipport": port or bmc.port, "ssl_insecure": True,
                   "systems_uri": bmc.system_path, "power_timeout": 3},
                  **params)
    return entry("fence_redfish", "127.0.0.1", bmc.username,
                 password or bmc.password, **params)


@pytest.fixture(params=["ipmi", "redfish"])
def kind(request):
    return request.param


@pytest.fixture
def bmc(request, kind):
    """The kind's BMC peer, powered on and complying (its agent checked
    first: no peer is started for a test that cannot run)."""
    need_agent("fence_ipmilan" if kind == "ipmi" else "fence_redfish")
    peer = request.getfixturevalue("%s_bmc" % kind)
    if kind == "ipmi":
        peer.refuse_power_off(False)
    if peer.power_state() != "on":
        peer.power_on()
        procs.wait_until(lambda: peer.power_state() == "on", 10,
                         "powered on", "%s BMC" % kind, peer.log)
    return peer


def make_entry(kind, peer, **kwargs):
    return (ipmi_entry if kind == "ipmi" else redfish_entry)(peer, **kwargs)


def free_closed_port(kind):
    return procs.free_port(kind=socket.SOCK_DGRAM if kind == "ipmi"
                           else socket.SOCK_STREAM)


def assert_fence_error(err, password):
    msg = str(err.value)
    assert HOST in msg
    assert password not in msg
    assert password.strip() not in msg
    return msg


# -- cases ----------------------------------------------------------------

def test_power_off_confirmed_then_on(driver, kind, bmc):
    bmc_entry = make_entry(kind, bmc)
    assert driver.power_state(bmc_entry) is base.PowerState.ON
    driver.power_off(bmc_entry)
    assert bmc.power_state() == "off"
    assert driver.power_state(bmc_entry) is base.PowerState.OFF
    if kind == "ipmi":
        sets = [c for c in bmc.calls() if " set " in c]
    driver.power_off(bmc_entry)                 # already off: no off sent
    if kind == "ipmi":
        assert [c for c in bmc.calls() if " set " in c] == sets
    assert bmc.power_state() == "off"
    driver.power_on(bmc_entry)
    assert bmc.power_state() == "on"


def test_refused_power_off_is_fence_error_and_host_stays_on(
        driver, kind, bmc, request):
    if kind == "ipmi":
        peer = bmc
        peer.refuse_power_off(True)
    else:
        peer = request.getfixturevalue("refusing_redfish_bmc")
    bmc_entry = make_entry(kind, peer)
    with pytest.raises(base.FenceError) as err:
        driver.power_off(bmc_entry)
    msg = assert_fence_error(err, peer.password)
    assert "Timed out waiting to power OFF" in msg
    assert peer.power_state() == "on"


def test_wrong_password_is_fence_error_without_it(driver, kind, bmc):
    wrong = "Wr0ng-" + bmc.password.strip()[:8]
    bmc_entry = make_entry(kind, bmc, password=wrong)
    with pytest.raises(base.FenceError) as err:
        driver.power_off(bmc_entry)
    assert_fence_error(err, wrong)
    assert bmc.power_state() == "on"


def test_unreachable_bmc_is_fence_error(driver, kind, bmc):
    bmc_entry = make_entry(kind, bmc, port=free_closed_port(kind),
                           power_timeout=2)
    with pytest.raises(base.FenceError) as err:
        driver.power_off(bmc_entry)
    msg = assert_fence_error(err, bmc.password)
    assert "could not reach the device" in msg and "2 attempt(s)" in msg
    assert bmc.power_state() == "on"


def test_missing_agent_is_fence_error_naming_it(driver):
    bmc_entry = entry("fence_not_there", "127.0.0.1", "admin", "pw")
    with pytest.raises(base.FenceError) as err:
        driver.power_off(bmc_entry)
    assert "%s: fence agent fence_not_there is not installed" % HOST \
        in str(err.value)


# -- the process, as the agent sees it -------------------------------------

RECORDER = """#!/bin/sh
# records how it was started and what it read, then answers 'on'
echo "$#" > "{dir}/argc"
cat > "{dir}/stdin"
echo "Status: ON"
exit 0
"""

HANGER = """#!/bin/sh
# starts a child that would outlive it, then never answers
sleep 300 &
echo $! > "{dir}/child"
wait
"""


def agent_script(tmp_path, name, text):
    path = tmp_path / name
    path.write_text(text.format(dir=tmp_path))
    path.chmod(0o755)
    return path


def test_agent_gets_no_argument_and_password_only_on_stdin(conf, tmp_path):
    agent_script(tmp_path, "fence_recorder", RECORDER)
    drv = fence_agent.FenceAgentDriver(conf, search_path=[str(tmp_path)])
    bmc_entry = entry("fence_recorder", "10.0.0.5", "admin", "s3cret",
                      lanplus=1, ipport=6230)
    assert drv.power_state(bmc_entry) is base.PowerState.ON
    assert (tmp_path / "argc").read_text().strip() == "0"
    assert (tmp_path / "stdin").read_text() == (
        'action="status"\nip="10.0.0.5"\nusername="admin"\n'
        'password="s3cret"\nlanplus="1"\nipport="6230"\n')


def test_hung_agent_is_killed_with_its_children(conf, tmp_path):
    agent_script(tmp_path, "fence_hanger", HANGER)
    drv = fence_agent.FenceAgentDriver(conf, search_path=[str(tmp_path)])
    data = {"hosts": {HOST: {"driver": "fence_agent", "agent": "fence_hanger",
                             "agent_timeout": 1}}}
    bmc_entry = inventory.parse(data, fencing.FIELDS)[HOST]
    t0 = time.monotonic()
    with pytest.raises(base.FenceError) as err:
        drv.power_off(bmc_entry)
    assert time.monotonic() - t0 < 10
    assert "%s: fence agent fence_hanger did not finish power status " \
        "within 1 s" % HOST in str(err.value)
    child = int((tmp_path / "child").read_text())
    procs.wait_until(lambda: not procs.pid_alive(child), 5, "killed", "fence_hanger")




@pytest.fixture(scope="module")
def lazy_redfish_bmc(workdir):
    """Accepts every power-off and never carries it out."""
    bmc = started(lambda: redfish.RedfishBMC(
        HOST + "-lazy", workdir, ignore_power_off=True).start())
    yield bmc
    bmc.stop()


def test_bmc_accepting_but_never_off_is_fence_error(driver, request):
    need_agent("fence_redfish")
    peer = request.getfixturevalue("lazy_redfish_bmc")
    with pytest.raises(base.FenceError) as err:
        driver.power_off(redfish_entry(peer))
    msg = assert_fence_error(err, peer.password)
    assert "Timed out waiting to power OFF" in msg, msg
    assert peer.power_state() == "on" and peer.stats()["ignored"] >= 1
