"""Every journal write survives a real deadlock on MariaDB (issue 34,
part 4): each public write method of the Journal (derived from the class:
tests/unit/journal_writes.py) is made the victim of a deadlock that two
connections locking rows in opposite order create, and is run again by
the journal's one retrying runner instead of lost.

The cycle: the journal's transaction first locks row 1 of a helper table
(a hook at the start of its first try), then its write waits for the
other connection, which holds every journal table's rows FOR UPDATE and
has changed many helper rows; that connection then asks for row 1.
InnoDB rolls back the lighter transaction, the journal's (1213)."""

import contextlib
import threading
import time

import pytest
import sqlalchemy as sa
import structlog

from functional.journal_dbs import database
from instanceha.journal import Journal
from instanceha.journal import store
from tests.unit import journal_writes

#: Helper rows the other connection changes to be the heavier side.
HEAVY = 60

#: Seconds between two reads of information_schema.innodb_trx. InnoDB
#: serves that table from a cache it refreshes only when the cache has not
#: been read for 100 ms: read more often and it keeps showing the snapshot
#: it first took (an earlier test's transactions), and a lock wait that
#: began since is never seen.
TRX_POLL = 0.25


@pytest.fixture(scope="module")
def url():
    with database("mariadb", None) as u:
        engine = sa.create_engine(u)
        with engine.begin() as c:
            c.execute(sa.text("CREATE TABLE deadlock_rows (id INT PRIMARY "
                              "KEY, n INT NOT NULL) ENGINE=InnoDB"))
            c.execute(sa.text("INSERT INTO deadlock_rows VALUES (:i, 0)"),
                      [dict(i=i) for i in range(1, HEAVY + 1)])
        engine.dispose()
        yield u


def _until(what, condition, budget=30.0, interval=0.02):
    deadline = time.monotonic() + budget
    while not condition():
        assert time.monotonic() < deadline, "not within %ss: %s" % (
            budget, what)
        time.sleep(interval)


@pytest.mark.parametrize("name", sorted(journal_writes.CALLS))
def test_a_write_made_a_deadlock_victim_is_done_once(url, name):
    assert set(journal_writes.CALLS) == journal_writes.WRITES
    prepare, call, check = journal_writes.CALLS[name]
    j = Journal(url)
    other = sa.create_engine(url)
    try:
        p = prepare(j)
        tries, holding = [], threading.Event()
        real = j._transaction

        @contextlib.contextmanager
        def transaction():
            with real() as c:
                tries.append(c.execute(sa.text(
                    "SELECT CONNECTION_ID()")).scalar())
                if len(tries) == 1:
                    c.execute(sa.text("UPDATE deadlock_rows SET n = n + 1 "
                                      "WHERE id = 1"))
                    holding.set()
                yield c
        j._transaction = transaction
        with other.connect() as x:
            x.execute(sa.text("UPDATE deadlock_rows SET n = n + 1 "
                              "WHERE id > 1"))
            for table in store.METADATA.sorted_tables:
                x.execute(sa.select(table.c.id).with_for_update())
            failed = []

            def write():
                try:
                    call(j, p)
                except Exception as e:   # noqa: BLE001 - asserted below
                    failed.append(e)
            with structlog.testing.capture_logs() as logs:
                thread = threading.Thread(target=write)
                thread.start()
                _until("the journal's write holds row 1", holding.is_set)
                waiting = sa.text(
                    "SELECT COUNT(*) FROM information_schema.innodb_trx "
                    "WHERE trx_state = 'LOCK WAIT' "
                    "AND trx_mysql_thread_id = :t")
                with other.connect() as watch:
                    _until("the journal's write waits for the other side",
                           lambda: watch.execute(waiting, dict(
                               t=tries[0])).scalar() == 1,
                           interval=TRX_POLL)
                # Opposite order: the cycle is closed, InnoDB breaks it.
                x.execute(sa.text("UPDATE deadlock_rows SET n = n + 1 "
                                  "WHERE id = 1"))
                x.commit()
                thread.join(60)
                assert not thread.is_alive()
        assert failed == []
        assert len(tries) == 2
        retried = [e for e in logs if e["event"] == "journal_write_retried"]
        assert len(retried) == 1 and "1213" in retried[0]["reason"], logs
        check(j, p)
    finally:
        other.dispose()
        j.close()
