"""Journal times are exact on every database (issue 34, part 0).

sa.Float was single precision on MariaDB: 1795925561.8 read back as
1795930000. Every time column is now a double, reached through schema
migrations that also widen a journal made by an older release in place.
"""

import threading

import pytest
import sqlalchemy as sa

from functional.journal_dbs import database
from instanceha.journal import Journal
from instanceha.journal import migrate
from instanceha.journal import store
from instanceha.journal.migrations import legacy

#: A current epoch time with microseconds.
T = 1795925561.812345


@pytest.fixture(params=["sqlite", "mariadb", "postgresql"])
def url(request, tmp_path):
    with database(request.param, tmp_path) as u:
        yield u


def _row(table):
    """A row for ``table``: T in every time column, T inside every JSON
    column, a filler elsewhere."""
    row = {}
    for col in table.columns:
        if col.primary_key:
            continue
        if isinstance(col.type, sa.Float):
            row[col.name] = T
        elif isinstance(col.type, sa.JSON):
            row[col.name] = {"at": T, "times": [T, T + 0.000001]}
        elif isinstance(col.type, sa.Integer):
            row[col.name] = 2 ** 31 - 1
        else:
            row[col.name] = "x"
    return row


def _round_trip_everything(journal):
    """Insert a row in each journal table and read it back: every time and
    every number equal to what was written."""
    checked = []
    with journal.engine.begin() as c:
        for table in store.METADATA.sorted_tables:
            row = _row(table)
            pk = c.execute(table.insert(), row).inserted_primary_key[0]
            back = dict(c.execute(sa.select(table).where(
                table.c.id == pk)).one()._mapping)
            for name, value in row.items():
                assert back[name] == value, (table.name, name, back[name])
                if isinstance(value, float):
                    checked.append((table.name, name))
    return checked


def test_every_time_column_is_a_double():
    """No single-precision column is left in the journal's schema, and
    every time column (legacy.TIMES, and each later one named *_at) is
    one of them."""
    floats = {(t.name, c.name) for t in store.METADATA.sorted_tables
              for c in t.columns if isinstance(c.type, sa.Float)}
    assert set(legacy.TIMES) <= floats
    for t in store.METADATA.sorted_tables:
        for c in t.columns:
            if isinstance(c.type, sa.Float):
                assert isinstance(c.type, sa.Double), (t.name, c.name)
            if c.name == "at" or c.name.endswith("_at"):
                assert (t.name, c.name) in floats, (t.name, c.name)


def test_every_time_round_trips_exactly(url):
    j = Journal(url)
    try:
        checked = _round_trip_everything(j)
        # Every time column of every table was written and read back.
        floats = {(t.name, c.name) for t in store.METADATA.sorted_tables
                  for c in t.columns if isinstance(c.type, sa.Float)}
        assert set(checked) == floats
        # And through the journal's own API, which the engine reads.
        aid = j.action_started(_Rec(), _Kind(), T)
        assert [a["started_at"] for a in j.actions("u-9")] == [T]
        assert j.history("u-9")[0]["at"] == T
        assert [a["id"] for a in j.history(
            "u-9", since=T, until=T + 0.000002)] == [aid]
        # A time that names a row (a drain's since) finds it again.
        j.drain_saved("u-9", "compute-9", T, T, T, {"n": 1})
        j.drain_saved("u-9", "compute-9", T, T + 1, T, {"n": 2})
        assert [r["state"] for r in j.drain_runs("u-9")] == [{"n": 2}]
        assert j.drain_run("u-9", T)["updated_at"] == T + 1
    finally:
        j.close()


class _Rec:
    id = "u-9"
    name = "compute-9"


class _Kind:
    value = "fence"


def _column_types(engine):
    insp = sa.inspect(engine)
    return {(t, c["name"]): str(c["type"]).upper()
            for t in insp.get_table_names() for c in insp.get_columns(t)}


def test_an_old_journal_is_adopted_and_widened_in_place(url):
    """A journal made by the release before migrations (create_all of its
    schema, no version table) with a row in it: opened by this release,
    it is adopted, stamped and widened, its rows kept; times written
    after read back exactly."""
    engine = sa.create_engine(url)
    try:
        legacy.metadata().create_all(engine)
        with engine.begin() as c:
            c.execute(sa.text(
                "INSERT INTO transitions (host_id, host_name, at, src, dst, "
                "event, source, reason, record) VALUES ('u-1', 'compute-1', "
                ":at, 'active', 'suspect', 'heartbeat_lost', 'x', 'old', "
                "'{}')"), dict(at=T))
            old_at = c.execute(sa.text("SELECT at FROM transitions")).scalar()
        if engine.dialect.name == "mysql":
            # The fault itself: single precision, 10,000 s steps.
            assert abs(old_at - T) > 1000
            assert _column_types(engine)[("transitions", "at")] == "FLOAT"
        with engine.connect() as c:
            assert migrate.current(c) is None
    finally:
        engine.dispose()
    j = Journal(url)
    try:
        with j.engine.connect() as c:
            assert migrate.current(c) == migrate.HEAD
        assert [t["reason"] for t in j.transitions()] == ["old"]
        if j.engine.dialect.name == "mysql":
            types = _column_types(j.engine)
            for column in legacy.TIMES:
                assert types[column] == "DOUBLE", column
            # NOT NULL kept through the change of type.
            cols = {c["name"]: c for c in
                    sa.inspect(j.engine).get_columns("transitions")}
            assert cols["at"]["nullable"] is False
        _round_trip_everything(j)
    finally:
        j.close()


def test_replicas_starting_at_once_upgrade_once(url):
    """Three journals opened at once on an empty database: each start
    waits for the one that upgrades, none fails."""
    errors, journals = [], []

    def start():
        try:
            journals.append(Journal(url))
        except Exception as e:   # noqa: BLE001 - collected, asserted
            errors.append(e)
    threads = [threading.Thread(target=start) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    try:
        assert errors == []
        assert len(journals) == 3
        with journals[0].engine.connect() as c:
            assert migrate.current(c) == migrate.HEAD
    finally:
        for j in journals:
            j.close()
