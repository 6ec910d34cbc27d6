"""A BMC evidence write ended as a deadlock victim (MariaDB, replicas
writing the same host's row at once) is tried again, not lost: found by
functional/test_coordination.py, where a "seen On" lost that way left
the member elected next unable to prove the host dead."""

import contextlib

import pytest
import sqlalchemy as sa

from instanceha.journal import Journal
from instanceha.journal import store


class _DBError(Exception):
    pass


def _victim(code):
    return sa.exc.OperationalError("INSERT ...", {}, _DBError(
        code, "Deadlock found when trying to get lock"))


def _failing(journal, errors):
    real = journal._write

    @contextlib.contextmanager
    def write():
        if errors:
            raise errors.pop(0)
        with real() as c:
            yield c
    return write


def test_a_deadlocked_evidence_write_is_tried_again():
    j = Journal("sqlite://")
    try:
        errors = [_victim(1213), _victim(1205)]
        j._write = _failing(j, errors)
        j.evidence_saved("compute-1", "redfish:bmc-1", 10.0, {"on_at": 9.0})
        assert errors == []
        assert j.evidence() == {("compute-1", "redfish:bmc-1"):
                                {"on_at": 9.0}}
    finally:
        j.close()


def test_other_errors_and_a_lasting_deadlock_still_raise():
    j = Journal("sqlite://")
    try:
        j._write = _failing(j, [_victim(1062)])
        with pytest.raises(sa.exc.OperationalError):
            j.evidence_saved("compute-1", "m", 10.0, {})
        j._write = _failing(j, [_victim(1213)] * store.DEADLOCK_TRIES)
        with pytest.raises(sa.exc.OperationalError):
            j.evidence_saved("compute-1", "m", 10.0, {})
        assert j.evidence() == {}
    finally:
        j.close()
