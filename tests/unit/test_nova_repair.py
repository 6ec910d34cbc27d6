"""The Nova driver's instance repair calls (drivers/compute/nova_repair.py),
against a scripted compute proxy."""

from tests.unit.test_nova_migrate import Resp, driver


def test_repair_markers_are_removed_before_the_new_ones_are_set():
    """A reader between the requests never sees the new result beside the
    old 'running' marker: the DELETEs go first, the POST last."""
    d, c = driver([Resp(204), Resp(204), Resp(200, {"metadata": {}})])
    d.set_server_metadata("s1", {"k:running": None, "k:pending": None,
                                 "k:result": "start success"})
    assert [(m, p) for m, p, *_ in c.calls] == [
        ("DELETE", "/servers/s1/metadata/k%3Arunning"),
        ("DELETE", "/servers/s1/metadata/k%3Apending"),
        ("POST", "/servers/s1/metadata")]
    assert c.calls[-1][3] == {"metadata": {"k:result": "start success"}}
