"""The BareMetalHost fencing driver against our Kubernetes API emulator.

The emulator (functional/peers/kubeapi.py) serves in this process over TLS
with a bearer token; its fake Metal3 controller runs on the test's clock
(no thread): the driver's injected sleep advances that clock, and every
read applies the power changes then due. Polls, retries and timeouts take
no real time.
"""

import http.client
import json
import ssl

import pytest
from structlog.testing import capture_logs
import yaml

from functional.peers import kubeapi
from functional.peers.redfish import make_cert
from instanceha import conf as iha_conf
from instanceha.drivers import fencing
from instanceha.drivers.fencing import base, bmh, inventory, load_driver

TOKEN = "tok-3f9a2c81d7e64b05"
NS = "metal3"


class Clock:
    def __init__(self):
        self.t = 1000.0
        self.sleeps = []

    def __call__(self):
        return self.t

    def sleep(self, seconds):
        self.sleeps.append(seconds)
        self.t += seconds


@pytest.fixture(scope="module")
def tls(tmp_path_factory):
    d = tmp_path_factory.mktemp("kubeapi-tls")
    return make_cert(d, d / "openssl.log")


@pytest.fixture
def clock():
    return Clock()


@pytest.fixture
def api(tls, clock):
    cert, key = tls
    server = kubeapi.KubeAPIServer(token=TOKEN, cert=cert, key=key, delay=3,
                                   controller=False, clock=clock)
    server.start()
    server.add_host("compute-0", namespace=NS)
    yield server
    server.stop()


@pytest.fixture
def conf():
    return iha_conf.make({"fencing": {"timeout": 10, "poll_interval": 1,
                                      "retries": 3}})


@pytest.fixture
def driver(conf, clock):
    d = bmh.BareMetalHostDriver(conf, sleep=clock.sleep, clock=clock)
    yield d
    d.close()


def entry(host="compute-0", **fields):
    data = {"driver": "bmh", "namespace": NS}
    data.update(fields)
    return inventory.parse({"hosts": {host: data}}, fencing.FIELDS)[host]


def api_entry(api, tls, host="compute-0", **fields):
    values = {"api_url": api.url, "ca_file": str(tls[0]), "password": TOKEN}
    values.update(fields)
    return entry(host, **values)


# -- power off ---------------------------------------------------------------

def test_power_off_patches_online_false_with_hard_annotation_and_waits(
        api, tls, driver, clock):
    driver.power_off(api_entry(api, tls))
    obj = api.host("compute-0", NS)
    assert obj["spec"]["online"] is False
    value = obj["metadata"]["annotations"]["reboot.metal3.io/instanceha"]
    assert json.loads(value) == {"mode": "hard"}
    assert obj["status"]["poweredOn"] is False
    # the controller took 3 s: three polls a second apart
    assert clock.sleeps == [1, 1, 1]
    assert api.events() == [{"namespace": NS, "name": "compute-0",
                             "power": "off", "mode": "hard"}]
    assert api.stats["patch"] == 1
    assert api.stats["patch_types"] == {kubeapi.MERGE_PATCH: 1}


def test_already_off_is_success_without_patching(api, tls, driver, clock):
    api.add_host("compute-1", namespace=NS, online=True, powered_on=False)
    driver.power_off(api_entry(api, tls, host="compute-1"))
    assert api.stats["patch"] == 0
    assert clock.sleeps == []
    assert api.host("compute-1", NS)["metadata"]["annotations"] == {}


def test_never_off_times_out_naming_host_and_last_state(api, tls, driver,
                                                        clock):
    api.configure(stuck="*")
    start = clock()
    with pytest.raises(base.FenceError) as err:
        driver.power_off(api_entry(api, tls))
    text = str(err.value)
    assert "compute-0" in text
    assert "metal3/compute-0" in text
    assert "poweredOn true" in text
    assert "spec.online false" in text
    assert TOKEN not in text
    assert clock() - start >= 10
    assert api.host("compute-0", NS)["status"]["poweredOn"] is True


def test_controller_error_is_in_the_timeout_message(api, tls, driver):
    api.configure(power_error=[[NS, "compute-0"]])
    with pytest.raises(base.FenceError) as err:
        driver.power_off(api_entry(api, tls))
    assert "operational status error: failed to power off" in str(err.value)


def test_bmh_name_and_namespace_from_the_inventory(api, tls, driver):
    api.add_host("bmh-rack2-07", namespace="openshift-machine-api")
    bmc = api_entry(api, tls, host="compute-7", name="bmh-rack2-07",
                    namespace="openshift-machine-api")
    driver.power_off(bmc)
    assert api.host("bmh-rack2-07",
                    "openshift-machine-api")["status"]["poweredOn"] is False
    assert api.host("compute-0", NS)["status"]["poweredOn"] is True


# -- power state and power on ------------------------------------------------

def test_power_state_reads_status_powered_on(api, tls, driver):
    bmc = api_entry(api, tls)
    assert driver.power_state(bmc) is base.PowerState.ON
    api.set_power("compute-0", False, namespace=NS)
    assert driver.power_state(bmc) is base.PowerState.OFF
    with api.lock:
        del api.hosts[(NS, "compute-0")]["status"]["poweredOn"]
    assert driver.power_state(bmc) is base.PowerState.UNKNOWN


def test_power_on_removes_the_annotation_and_sets_online(api, tls, driver,
                                                         clock):
    bmc = api_entry(api, tls)
    driver.power_off(bmc)
    api.host("compute-0", NS)
    driver.power_on(bmc)
    obj = api.host("compute-0", NS)
    assert obj["spec"]["online"] is True
    assert "reboot.metal3.io/instanceha" not in obj["metadata"]["annotations"]
    clock.sleep(3)
    assert api.host("compute-0", NS)["status"]["poweredOn"] is True
    assert driver.power_state(bmc) is base.PowerState.ON


def test_power_on_keeps_other_clients_annotations(api, tls, driver):
    api.add_host("compute-2", namespace=NS,
                 annotations={"reboot.metal3.io/other": "",
                              "team": "storage"})
    bmc = api_entry(api, tls, host="compute-2")
    driver.power_on(bmc)
    annotations = api.host("compute-2", NS)["metadata"]["annotations"]
    assert annotations == {"reboot.metal3.io/other": "", "team": "storage"}


# -- refusals ----------------------------------------------------------------

def test_wrong_token_is_credentials_refused_not_retried(api, tls, driver,
                                                        clock):
    wrong = "wrong-" + TOKEN
    with capture_logs() as logs:
        with pytest.raises(base.FenceError) as err:
            driver.power_off(api_entry(api, tls, password=wrong))
    text = str(err.value)
    assert "compute-0" in text and "refused the credentials" in text
    assert "401" in text
    assert wrong not in text and TOKEN not in text
    assert wrong not in repr(logs) and TOKEN not in repr(logs)
    assert api.stats["unauthorized"] == 1
    assert clock.sleeps == []
    assert api.host("compute-0", NS)["status"]["poweredOn"] is True


def test_forbidden_patch_is_credentials_refused(api, tls, driver):
    api.configure(refuse_patch=403)
    with pytest.raises(base.FenceError) as err:
        driver.power_off(api_entry(api, tls))
    assert "refused the credentials (HTTP 403" in str(err.value)
    assert "cannot patch" in str(err.value)
    assert api.host("compute-0", NS)["spec"]["online"] is True


def test_webhook_refusal_is_fence_error(api, tls, driver):
    api.configure(refuse_patch=422)
    with pytest.raises(base.FenceError) as err:
        driver.power_off(api_entry(api, tls))
    assert "HTTP 422" in str(err.value)
    assert "denied the request" in str(err.value)


def test_unknown_bmh_names_namespace_and_name(api, tls, driver, clock):
    with pytest.raises(base.FenceError) as err:
        driver.power_off(api_entry(api, tls, host="compute-9"))
    text = str(err.value)
    assert "compute-9" in text
    assert "no such BareMetalHost metal3/compute-9" in text
    assert clock.sleeps == []


# -- retries -----------------------------------------------------------------

def test_conflict_on_patch_is_retried(api, tls, driver, clock):
    api.configure(fail_next={"count": 2, "status": 409,
                             "methods": ["PATCH"]})
    driver.power_off(api_entry(api, tls))
    assert api.stats["conflicts"] == 2
    assert api.host("compute-0", NS)["status"]["poweredOn"] is False
    # two retries of the patch, then three polls
    assert clock.sleeps == [1, 1, 1, 1, 1]


def test_conflict_that_persists_fails(api, tls, driver):
    api.configure(fail_next={"count": 99, "status": 409,
                             "methods": ["PATCH"]})
    with pytest.raises(base.FenceError) as err:
        driver.power_off(api_entry(api, tls))
    assert "409 Conflict" in str(err.value)
    assert "after 3 attempts" in str(err.value)


@pytest.mark.parametrize("status", [500, 503, 429])
def test_server_errors_are_retried(api, tls, driver, status):
    api.configure(fail_next={"count": 2, "status": status})
    driver.power_off(api_entry(api, tls))
    assert api.host("compute-0", NS)["status"]["poweredOn"] is False


def test_server_error_that_persists_fails_after_retries(api, tls, driver,
                                                        clock):
    api.configure(fail_next={"count": 99, "status": 503})
    with pytest.raises(base.FenceError) as err:
        driver.power_off(api_entry(api, tls))
    text = str(err.value)
    assert "compute-0" in text and "after 3 attempts" in text
    assert "still answered HTTP 503 after 3 attempts" in text
    assert clock.sleeps == [1, 1]


def test_unreachable_api_is_retried_then_fence_error(tls, driver, clock):
    from functional.peers import procs
    url = "https://127.0.0.1:%d" % procs.free_port()
    bmc = entry(api_url=url, ca_file=str(tls[0]), password=TOKEN)
    with pytest.raises(base.FenceError) as err:
        driver.power_off(bmc)
    text = str(err.value)
    assert "compute-0" in text and "unreachable after 3 attempts" in text
    assert url in text and TOKEN not in text
    assert clock.sleeps == [1, 1]


# -- TLS and credentials -----------------------------------------------------

def test_unknown_ca_is_a_tls_error_not_retried(api, driver, clock):
    bmc = entry(api_url=api.url, password=TOKEN)
    with pytest.raises(base.FenceError) as err:
        driver.power_state(bmc)
    assert "TLS with the Kubernetes API" in str(err.value)
    assert "ca_file" in str(err.value)
    assert clock.sleeps == []


@pytest.mark.filterwarnings(
    "ignore::urllib3.exceptions.InsecureRequestWarning")
def test_insecure_accepts_any_certificate(api, driver):
    bmc = entry(api_url=api.url, password=TOKEN, insecure=True)
    assert driver.power_state(bmc) is base.PowerState.ON


def test_token_file_is_read_before_each_request(api, tls, driver, tmp_path):
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN + "\n")
    bmc = entry(api_url=api.url, ca_file=str(tls[0]),
                token_file=str(token_file))
    assert driver.power_state(bmc) is base.PowerState.ON
    # the service account's token is rotated: the file and the API agree
    api.configure(token="rotated-token-2")
    token_file.write_text("rotated-token-2\n")
    assert driver.power_state(bmc) is base.PowerState.ON
    token_file.write_text("")
    with pytest.raises(base.FenceError) as err:
        driver.power_state(bmc)
    assert "option token_file" in str(err.value) and "empty" in str(
        err.value)


def test_plain_http_without_token(clock, driver):
    # e.g. kubectl proxy on loopback
    server = kubeapi.KubeAPIServer(controller=False, clock=clock, delay=0)
    with server:
        server.add_host("compute-0", namespace=NS)
        bmc = entry(api_url=server.url)
        driver.power_off(bmc)
        assert server.host("compute-0", NS)["status"]["poweredOn"] is False


def _kubeconfig(path, api, tls, contexts, current):
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config",
        "clusters": [{"name": "metal", "cluster": {
            "server": api.url, "certificate-authority": str(tls[0])}}],
        "users": [{"name": name, "user": {"token": token}}
                  for name, token in contexts.items()],
        "contexts": [{"name": name, "context": {"cluster": "metal",
                                                "user": name}}
                     for name in contexts],
        "current-context": current}))
    return path


def test_kubeconfig_and_context(api, tls, driver, tmp_path):
    path = _kubeconfig(tmp_path / "kubeconfig", api, tls,
                       {"fencer": TOKEN, "viewer": "not-the-token"},
                       current="viewer")
    with pytest.raises(base.FenceError) as err:
        driver.power_state(entry(kubeconfig=str(path)))
    assert "refused the credentials" in str(err.value)
    assert "not-the-token" not in str(err.value)
    bmc = entry(kubeconfig=str(path), context="fencer")
    driver.power_off(bmc)
    assert api.host("compute-0", NS)["status"]["poweredOn"] is False


def test_changed_kubeconfig_is_read_again(api, tls, driver, tmp_path):
    path = _kubeconfig(tmp_path / "kubeconfig", api, tls,
                       {"fencer": "old-token"}, current="fencer")
    bmc = entry(kubeconfig=str(path))
    with pytest.raises(base.FenceError):
        driver.power_state(bmc)
    _kubeconfig(path, api, tls, {"fencer": TOKEN, "x": "y"},
                current="fencer")
    assert driver.power_state(entry(kubeconfig=str(path))) is \
        base.PowerState.ON


def test_kubeconfig_with_unknown_context(api, tls, driver, tmp_path):
    path = _kubeconfig(tmp_path / "kubeconfig", api, tls,
                       {"fencer": TOKEN}, current="fencer")
    with pytest.raises(base.FenceError) as err:
        driver.power_state(entry(kubeconfig=str(path), context="nope"))
    assert "option kubeconfig" in str(err.value)
    assert TOKEN not in str(err.value)


def test_nothing_falls_back_to_in_cluster_or_home(driver, monkeypatch,
                                                  tmp_path, api, tls):
    # a pod's environment and a ~/.kube/config are both there: neither is
    # used unless the inventory asks
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "127.0.0.1")
    monkeypatch.setenv("KUBERNETES_SERVICE_PORT", str(api.port))
    monkeypatch.setenv("HOME", str(tmp_path))
    (tmp_path / ".kube").mkdir()
    _kubeconfig(tmp_path / ".kube" / "config", api, tls, {"u": TOKEN}, "u")
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / ".kube" / "config"))
    with pytest.raises(base.FenceError) as err:
        driver.power_off(entry())
    assert "no Kubernetes API configured" in str(err.value)
    assert api.stats["requests"] == 0
    # asked for, in-cluster config is used (and here finds no token file)
    with pytest.raises(base.FenceError) as err:
        driver.power_state(entry(in_cluster=True))
    assert "option in_cluster: cannot load" in str(err.value)


# -- options -----------------------------------------------------------------

@pytest.mark.parametrize("fields,field,words", [
    ({"namespace": None, "api_url": "https://k:6443"}, "namespace",
     "required"),
    ({}, "api_url", "no Kubernetes API configured"),
    ({"api_url": "https://k:6443", "kubeconfig": "/etc/k"}, "kubeconfig",
     "choose one"),
    ({"api_url": "https://k:6443", "in_cluster": True}, "in_cluster",
     "choose one"),
    ({"api_url": "ftp://k"}, "api_url", "not an http(s) URL"),
    ({"api_url": "http://k:8001", "password": TOKEN}, "api_url",
     "in clear"),
    ({"api_url": "https://k:6443", "ca_file": "/nonexistent/ca.pem"},
     "ca_file", "no such file"),
    ({"api_url": "https://k:6443", "ca_file": __file__, "insecure": True},
     "insecure", "choose one"),
    ({"api_url": "https://k:6443", "insecure": "maybe"}, "insecure",
     "not true or false"),
    ({"api_url": "https://k:6443", "password": TOKEN, "token_file": "/t"},
     "token_file", "one of them"),
    ({"api_url": "https://k:6443", "context": "admin"}, "context",
     "kubeconfig only"),
    ({"kubeconfig": "/nonexistent/kubeconfig"}, "kubeconfig",
     "cannot read"),
    ({"in_cluster": True, "token_file": "/t"}, "token_file",
     "api_url only"),
    ({"in_cluster": True, "password": TOKEN}, "password", "api_url only"),
    ({"api_url": "https://k:6443", "timeout": 0}, "timeout",
     "positive number"),
])
def test_invalid_options_name_host_and_field(driver, fields, field, words):
    data = {"driver": "bmh", "namespace": NS}
    data.update(fields)
    data = {k: v for k, v in data.items() if v is not None}
    bmc = inventory.parse({"hosts": {"compute-0": data}},
                          fencing.FIELDS)["compute-0"]
    with pytest.raises(base.FenceError) as err:
        driver.power_off(bmc)
    text = str(err.value)
    assert text.startswith("host compute-0: option %s:" % field)
    assert words in text
    assert TOKEN not in text


def test_inventory_fields():
    bmc = entry(api_url="https://k:6443", name="bmh-7", ca_file="/ca.pem",
                token_file="/t", timeout=5, insecure=False)
    assert bmc.options["name"] == "bmh-7"
    entry(kubeconfig="/k", context="c")
    entry(in_cluster=True)
    with pytest.raises(inventory.InventoryError) as err:
        entry(api_url="https://k:6443", server="x")
    assert "unknown field server" in str(err.value)


def test_loaded_by_name(conf):
    assert isinstance(load_driver("bmh", conf), bmh.BareMetalHostDriver)


def test_clients_are_reused_and_closed(api, tls, driver):
    bmc = api_entry(api, tls)
    driver.power_state(bmc)
    driver.power_state(bmc)
    assert len(driver._clients) == 1
    driver.close()
    assert driver._clients == {}
    assert driver.power_state(bmc) is base.PowerState.ON


# -- the emulator itself -----------------------------------------------------

def _raw(api, tls, method, path, body=None, ctype=None):
    conn = http.client.HTTPSConnection(
        "127.0.0.1", api.port, timeout=5,
        context=ssl.create_default_context(cafile=str(tls[0])))
    headers = {"Authorization": "Bearer " + TOKEN}
    if ctype:
        headers["Content-Type"] = ctype
    try:
        conn.request(method, path, body=body, headers=headers)
        resp = conn.getresponse()
        return resp.status, json.loads(resp.read())
    finally:
        conn.close()


def test_emulator_json_patch_and_media_types(api, tls):
    path = ("/apis/metal3.io/v1alpha1/namespaces/%s/baremetalhosts/"
            "compute-0" % NS)
    ops = [{"op": "add", "path": "/metadata/annotations/reboot.metal3.io~1x",
            "value": "{\"mode\":\"soft\"}"},
           {"op": "replace", "path": "/spec/online", "value": False},
           {"op": "replace", "path": "/status/poweredOn", "value": False}]
    status, obj = _raw(api, tls, "PATCH", path, json.dumps(ops),
                       kubeapi.JSON_PATCH)
    assert status == 200
    assert obj["metadata"]["annotations"] == {
        "reboot.metal3.io/x": "{\"mode\":\"soft\"}"}
    assert obj["status"]["poweredOn"] is True      # a subresource
    status, obj = _raw(api, tls, "PATCH", path, json.dumps({"spec": {}}),
                       "application/strategic-merge-patch+json")
    assert status == 415 and obj["kind"] == "Status"
    status, obj = _raw(api, tls, "PATCH", path,
                       json.dumps({"spec": {"online": "no"}}),
                       kubeapi.MERGE_PATCH)
    assert status == 422
    status, obj = _raw(api, tls, "PATCH", path, json.dumps(
        {"metadata": {"annotations": {"a": True}}}), kubeapi.MERGE_PATCH)
    assert status == 400
    status, obj = _raw(api, tls, "PATCH", path, json.dumps(
        {"metadata": {"resourceVersion": "1"}, "spec": {"online": True}}),
        kubeapi.MERGE_PATCH)
    assert status == 409
