"""The bmh fencing driver against our Kubernetes API emulator, run as a
process of its own (functional/peers/kubeapi.py): HTTPS with a certificate
made for the run, a bearer token, and a fake Metal3 controller that moves
``status.poweredOn`` after a real delay. Each test asserts what the
emulated world says afterwards, through the peer's own control channel,
not through the driver.
"""

import json
import pathlib
import sys
import time

import pytest

REPO = pathlib.Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from functional import waiting  # noqa: E402
from functional.peers import kubeapi  # noqa: E402
from instanceha import conf as iha_conf  # noqa: E402
from instanceha.drivers import fencing  # noqa: E402
from instanceha.drivers.fencing import base, inventory  # noqa: E402
from instanceha.drivers.fencing import load_driver  # noqa: E402

HOST = "compute-0"
CONTROLLER_DELAY = 0.3
ANNOTATION = "reboot.metal3.io/instanceha"


@pytest.fixture
def conf():
    return iha_conf.make({"fencing": {"timeout": 2, "poll_interval": 0.1,
                                      "retries": 3}})


@pytest.fixture
def peer(tmp_path):
    api = kubeapi.KubeAPIPeer("bmh", tmp_path, delay=CONTROLLER_DELAY)
    api.start()
    api.add_host(HOST)
    yield api
    api.stop()


@pytest.fixture
def driver(conf):
    d = load_driver("bmh", conf)
    yield d
    d.close()


def entry(peer, host=HOST, **fields):
    data = dict(peer.inventory_entry(host), **fields)
    return inventory.parse({"hosts": {host: data}}, fencing.FIELDS)[host]


def test_power_off_is_confirmed_by_the_controller(peer, driver):
    bmc = entry(peer)
    assert driver.power_state(bmc) is base.PowerState.ON
    t0 = time.monotonic()
    driver.power_off(bmc)
    elapsed = time.monotonic() - t0
    # the world: the controller powered it off, hard, and holds it off
    assert peer.power_state(HOST) == "off"
    assert elapsed >= CONTROLLER_DELAY
    obj = peer.host(HOST)
    assert obj["spec"]["online"] is False
    assert json.loads(obj["metadata"]["annotations"][ANNOTATION]) == {
        "mode": "hard"}
    assert peer.events() == [{"namespace": peer.namespace, "name": HOST,
                              "power": "off", "mode": "hard"}]
    assert peer.stats()["patch_types"] == {kubeapi.MERGE_PATCH: 1}
    # fencing again: already off, nothing patched
    driver.power_off(bmc)
    assert peer.stats()["patch"] == 1


def test_power_on_restores_the_host(peer, driver):
    bmc = entry(peer)
    driver.power_off(bmc)
    assert peer.power_state(HOST) == "off"
    driver.power_on(bmc)
    waiting.wait_for(lambda: peer.power_state(HOST) == "on", 5,
                     "the controller to power %s on" % HOST)
    obj = peer.host(HOST)
    assert obj["spec"]["online"] is True
    assert ANNOTATION not in obj["metadata"]["annotations"]
    assert driver.power_state(bmc) is base.PowerState.ON
    assert [e["power"] for e in peer.events()] == ["off", "on"]


def test_host_never_reaching_off_times_out(peer, driver, conf):
    peer.configure(stuck="*")
    t0 = time.monotonic()
    with pytest.raises(base.FenceError) as err:
        driver.power_off(entry(peer))
    elapsed = time.monotonic() - t0
    text = str(err.value)
    assert HOST in text
    assert "poweredOn true" in text
    assert "%gs" % conf.fencing.timeout in text
    assert peer.token not in text
    assert conf.fencing.timeout <= elapsed < conf.fencing.timeout + 2
    # asked, but still on
    assert peer.power_state(HOST) == "on"
    assert peer.host(HOST)["spec"]["online"] is False


def test_controller_refusing_is_reported(peer, driver):
    peer.configure(power_error="*")
    with pytest.raises(base.FenceError) as err:
        driver.power_off(entry(peer))
    assert "operational status error" in str(err.value)
    assert peer.power_state(HOST) == "on"


def test_wrong_token_is_fence_error_without_the_token(peer, driver):
    wrong = "not-" + peer.token
    with pytest.raises(base.FenceError) as err:
        driver.power_off(entry(peer, password=wrong))
    text = str(err.value)
    assert HOST in text and "refused the credentials" in text
    assert wrong not in text and peer.token not in text
    assert peer.power_state(HOST) == "on"
    assert peer.host(HOST)["spec"]["online"] is True
    assert peer.stats()["unauthorized"] == 1


def test_unknown_bmh_is_fence_error(peer, driver):
    with pytest.raises(base.FenceError) as err:
        driver.power_off(entry(peer, host="compute-404"))
    text = str(err.value)
    assert "compute-404" in text
    assert "no such BareMetalHost %s/compute-404" % peer.namespace in text
    assert peer.power_state(HOST) == "on"


def test_unreachable_api_is_fence_error(peer, driver):
    bmc = entry(peer)
    assert driver.power_state(bmc) is base.PowerState.ON  # a kept connection
    peer.stop()
    t0 = time.monotonic()
    with pytest.raises(base.FenceError) as err:
        driver.power_off(bmc)
    text = str(err.value)
    assert HOST in text and "unreachable after 3 attempts" in text
    assert peer.url in text and peer.token not in text
    assert time.monotonic() - t0 < 5


def test_conflicts_and_server_errors_are_retried(peer, driver):
    peer.configure(fail_next={"count": 2, "status": 409,
                              "methods": ["PATCH"]})
    driver.power_off(entry(peer))
    assert peer.power_state(HOST) == "off"
    assert peer.stats()["conflicts"] == 2
    peer.add_host("compute-1")
    peer.configure(fail_next={"count": 2, "status": 503})
    driver.power_off(entry(peer, host="compute-1"))
    assert peer.power_state("compute-1") == "off"
