"""NovaDriver.service_of: one host's row, asked of Nova by host (not the
whole cloud's list, megabytes at thousands of hosts)."""

import copy

from tests.unit import fakes
from tests.unit.test_nova_read_retry import SERVICES, Compute, Resp, driver


class Recording(Compute):
    def get(self, path, **kwargs):
        self.params = kwargs.get("params")
        return super().get(path, **kwargs)


def test_asks_nova_for_that_hosts_compute_row_only():
    d, compute, _ = driver([Resp(200, SERVICES)], compute_class=Recording)
    svc = d.service_of("compute-0")
    assert (svc.id, svc.host, svc.state) == ("u1", "compute-0", "up")
    assert compute.calls == [("GET", "/os-services")]
    assert compute.params == {"binary": "nova-compute", "host": "compute-0"}


def test_a_host_nova_does_not_list_has_no_row():
    d, _, _ = driver([Resp(200, {"services": []})], compute_class=Recording)
    assert d.service_of("compute-9") is None


def test_a_row_of_another_host_is_not_taken_for_it():
    # A Nova that ignored the filter answers every row: only the asked
    # host's row is the answer.
    body = copy.deepcopy(SERVICES)
    body["services"][0]["host"] = "compute-1"
    d, _, _ = driver([Resp(200, body)], compute_class=Recording)
    assert d.service_of("compute-0") is None


def test_the_base_drivers_answer_reads_the_list():
    compute = fakes.FakeCompute(fakes.Clock(), hosts=1)
    assert compute.service_of("compute-0").host == "compute-0"
    assert compute.service_of("nowhere") is None
