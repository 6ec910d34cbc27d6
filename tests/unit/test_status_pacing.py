"""The status file costs at most a tenth of the time: at thousands of
hosts a write during a storm takes long, and the next one waits nine times
as long (found at 5,000 hosts: 15 % of the engine's CPU during a storm)."""

import json

from instanceha.service import health


def test_a_cheap_write_waits_the_minimum_a_costly_one_nine_times_its_cost():
    assert health.status_gap(0.001) == health.STATUS_MIN_GAP
    assert health.status_gap(0.5) == 4.5
    assert 0.5 / (0.5 + health.status_gap(0.5)) == 0.1


def test_the_file_is_one_json_document_with_every_value(tmp_path):
    class Engine:
        def snapshot(self):
            return {"hosts": [{"name": "compute-1", "since": object()}]}

    class Conf:
        status_file = str(tmp_path / "status.json")

    h = health.StatusFile(Conf(), Engine().snapshot,
                          lambda: (True, "reconciler passed 1.0s ago"))
    h.write()
    data = json.loads((tmp_path / "status.json").read_text())
    assert data["hosts"][0]["name"] == "compute-1"
    assert data["hosts"][0]["since"].startswith("<object")
