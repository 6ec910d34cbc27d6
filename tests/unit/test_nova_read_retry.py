"""Nova reads are retried on a transient failure (5xx, no answer); writes
never are (an evacuation answered 500 may have been applied), and a 4xx
is an answer, not a failure. Found by the Nova-fault test: one evacuate
action makes several reads, and with a quarter of calls failing the
action as a whole failed again and again into a 60 s back-off."""

import json
import types

import pytest
from keystoneauth1 import exceptions as ks_exc

from instanceha import conf as conf_pkg
from instanceha.drivers.compute import base
from instanceha.drivers.compute.nova import NovaDriver

SERVICES = {"services": [{"id": "u1", "host": "compute-0",
                          "binary": "nova-compute", "state": "up",
                          "status": "enabled", "forced_down": False,
                          "updated_at": "2026-11-25T00:00:00.000000",
                          "zone": "nova", "disabled_reason": None}]}


class Resp:
    def __init__(self, status, body=None):
        self.status_code = status
        self._body = body if body is not None else {
            "computeFault": {"code": status, "message": "injected"}}
        self.content = json.dumps(self._body).encode()
        self.text = self.content.decode()

    def json(self):
        return self._body


class Compute:
    """An openstacksdk compute proxy answering from a script."""

    def __init__(self, answers):
        self.answers = list(answers)
        self.calls = []

    def get_endpoint_data(self):
        return types.SimpleNamespace(max_microversion=(2, 100))

    def _answer(self, method, path):
        self.calls.append((method, path))
        answer = self.answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer

    def get(self, path, **kwargs):
        return self._answer("GET", path)

    def post(self, path, **kwargs):
        self.kwargs = kwargs
        return self._answer("POST", path)


def driver(answers, retries=2, compute_class=None):
    """A NovaDriver on a scripted compute proxy (``compute_class``, this
    module's Compute by default); returns (driver, proxy, sleeps)."""
    conf = conf_pkg.make({"DEFAULT": {"api_read_retries": retries}})
    compute = (compute_class or Compute)(answers)
    slept = []
    d = NovaDriver(conf, connection=types.SimpleNamespace(compute=compute),
                   sleep=slept.append)
    return d, compute, slept


def test_a_read_failing_transiently_is_retried_until_it_answers():
    d, compute, slept = driver([Resp(503), ks_exc.ConnectTimeout(),
                                Resp(200, SERVICES)])
    assert [s.host for s in d.list_services()] == ["compute-0"]
    assert len(compute.calls) == 3 and len(slept) == 2
    assert all(0 < s <= 2 for s in slept)


def test_a_read_failing_every_time_raises_after_its_retries():
    d, compute, slept = driver([Resp(500)] * 3)
    with pytest.raises(base.ComputeError) as e:
        d.list_services()
    assert "HTTP 500" in str(e.value) and len(compute.calls) == 3


def test_a_4xx_answer_is_not_retried():
    d, compute, slept = driver([Resp(404)])
    with pytest.raises(base.NotFound):
        d.list_services()
    assert len(compute.calls) == 1 and slept == []


def test_a_write_is_never_retried():
    d, compute, slept = driver([Resp(500)])
    with pytest.raises(base.ComputeError):
        d.evacuate("s1")
    assert compute.calls == [("POST", "/servers/s1/action")] and slept == []


def test_no_retries_configured():
    d, compute, slept = driver([Resp(503)], retries=0)
    with pytest.raises(base.ComputeError):
        d.list_services()
    assert len(compute.calls) == 1


def test_a_write_is_not_retried_by_the_transport_either():
    """keystoneauth sends a request again on a connection failure or a
    503 when clouds.yaml sets connect_retries / status_code_retries: an
    evacuation would then be sent twice. Writes turn both off."""
    d, compute, slept = driver([Resp(202, {})])
    d.evacuate("s1")
    assert compute.kwargs["connect_retries"] == 0
    assert compute.kwargs["status_code_retries"] == 0


@pytest.mark.parametrize("answer, unanswered", [
    (ks_exc.ConnectTimeout("Request to http://nova timed out"), True),
    (ks_exc.ConnectFailure("Unable to establish connection to http://nova: "
                           "('Connection aborted.', RemoteDisconnected())"),
     True),
    (ks_exc.UnknownConnectionError("Unexpected exception", None), True),
    (Resp(504), True),
    (Resp(502), True),
    (ks_exc.ConnectFailure("Unable to establish connection to http://nova: "
                           "[Errno 111] Connection refused"), False),
    (Resp(503), False),
    (Resp(500), False),
])
def test_a_write_without_an_answer_says_it_may_still_land(answer,
                                                          unanswered):
    """No answer (a timeout, a connection cut once sent, a gateway's 502
    or 504): the request may still be queued before Nova's API and land
    later. A refused connection never reached it; a 500 or 503 is an
    answer."""
    d, compute, slept = driver([answer])
    with pytest.raises(base.ComputeError) as e:
        d.evacuate("s1")
    assert e.value.unanswered is unanswered


def test_every_failed_request_is_noted_for_the_control_plane_gate():
    """Issue 21, hole 4: the gate holds from the first failed call to
    Nova's API. The driver notes each request Nova failed (5xx, no
    answer), retried reads and writes alike, at the time it failed; a 4xx
    is an answer and is not noted."""
    conf = conf_pkg.make({"DEFAULT": {"api_read_retries": 2}})
    compute = Compute([Resp(503), Resp(200, SERVICES), Resp(404),
                       Resp(500), ks_exc.ConnectTimeout()])
    now = [100.0]
    d = NovaDriver(conf, connection=types.SimpleNamespace(compute=compute),
                   clock=lambda: now[0], sleep=lambda s: now.__setitem__(
                       0, now[0] + s))
    assert d.api_record.view() == (None, None, None, None)
    d.list_services()                   # 503, then answered
    read_at, _, failed_at, failure = d.api_record.view()
    assert failed_at == 100.0 and read_at is None
    assert failure == "GET /os-services: HTTP 503: injected"
    now[0] = 200.0
    with pytest.raises(base.NotFound):
        d.get_server("gone")
    assert d.api_record.view()[2] == 100.0
    with pytest.raises(base.ComputeError):
        d.evacuate("s1")
    assert d.api_record.view()[2:] == (200.0, "POST /servers/s1/action: "
                                              "HTTP 500: injected")
    now[0] = 300.0
    with pytest.raises(base.ComputeError):
        d.stop_server("s2")
    assert d.api_record.view()[2:] == (300.0, "POST /servers/s2/action: "
                                              "ConnectTimeout")
