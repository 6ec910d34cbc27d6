"""coordination.JOURNAL_WRITES: a standby (or a member whose lease
lapsed) writes nothing into the shared journal, including the BMC
evidence of engine/evidence.py."""

import pytest

from instanceha import coordination as co
from instanceha.journal import Journal


def test_a_standby_cannot_write_bmc_evidence():
    journal = Journal("sqlite://")
    why = ["standby: member b holds the leadership"]
    guarded = co.guard_journal(journal, lambda: why[0])
    with pytest.raises(co.NotActingJournal, match="evidence_saved refused"):
        guarded.evidence_saved("compute-1", "redfish:bmc-1", 10.0,
                               {"seen_on": 9.0})
    assert journal.evidence() == {}
    # Reads still pass; once acting, the write goes through.
    assert guarded.evidence() == {}
    why[0] = None
    guarded.evidence_saved("compute-1", "redfish:bmc-1", 10.0,
                           {"seen_on": 9.0})
    assert journal.evidence() == {("compute-1", "redfish:bmc-1"):
                                  {"seen_on": 9.0}}


def test_every_guarded_write_is_a_journal_method():
    # A misspelt name would leave the real write unguarded.
    missing = {name for name in co.JOURNAL_WRITES
               if not callable(getattr(Journal, name, None))}
    assert missing == set()
