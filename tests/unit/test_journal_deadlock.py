"""A journal write ended as a deadlock victim (MariaDB, replicas or
workers writing rows at once) is tried again, not lost: found by
functional/test_coordination.py, where a "seen On" lost that way left
the member elected next unable to prove the host dead. Every write goes
through the one retrying runner (issue 34, part 4); the same is forced
for real on MariaDB in functional/test_journal_deadlocks.py."""

import contextlib

import pytest
import sqlalchemy as sa

from instanceha.journal import Journal
from instanceha.journal import store
from tests.unit import journal_writes


class _DBError(Exception):
    pass


def _victim(code):
    return sa.exc.OperationalError("INSERT ...", {}, _DBError(
        code, "Deadlock found when trying to get lock"))


def _failing(journal, errors):
    real = journal._transaction

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
        j._transaction = _failing(j, errors)
        j.evidence_saved("compute-1", "redfish:bmc-1", 10.0, {"on_at": 9.0})
        assert errors == []
        assert j.evidence() == {("compute-1", "redfish:bmc-1"):
                                {"on_at": 9.0}}
    finally:
        j.close()


def test_other_errors_and_a_lasting_deadlock_still_raise():
    j = Journal("sqlite://")
    try:
        j._transaction = _failing(j, [_victim(1062)])
        with pytest.raises(sa.exc.OperationalError):
            j.evidence_saved("compute-1", "m", 10.0, {})
        j._transaction = _failing(j, [_victim(1213)] * store.DEADLOCK_TRIES)
        with pytest.raises(sa.exc.OperationalError):
            j.evidence_saved("compute-1", "m", 10.0, {})
        assert j.evidence() == {}
    finally:
        j.close()


def test_the_calls_cover_every_write_method():
    """journal_writes.WRITES is derived from the class: a new write method
    needs its call there (and so is tested below and on MariaDB)."""
    assert set(journal_writes.CALLS) == journal_writes.WRITES
    assert {"record", "evidence_saved", "repair_started",
            "close_open_actions"} <= journal_writes.WRITES


@pytest.mark.parametrize("name", sorted(journal_writes.CALLS))
def test_every_write_is_tried_again_after_a_deadlock(name):
    prepare, call, check = journal_writes.CALLS[name]
    j = Journal("sqlite://")
    try:
        p = prepare(j)
        errors = [_victim(1213), _victim(1205)]
        j._transaction = _failing(j, errors)
        call(j, p)
        assert errors == []
        check(j, p)
    finally:
        j.close()
