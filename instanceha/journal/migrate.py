"""The journal's schema brought to this release's revision (alembic), by
``instanceha db upgrade`` or at each start of ``instanceha run``.

A journal made by a release before migrations (its tables, no version
table) is adopted: the baseline revision creates only what it lacks,
then the later revisions change it in place. Replicas that start at once
take turns: the upgrade holds a lock in the database (MariaDB/MySQL
GET_LOCK, PostgreSQL advisory lock; SQLite serves one replica).
"""

import contextlib
import os
import threading

import sqlalchemy as sa
import structlog

from instanceha.journal import migrations

LOG = structlog.get_logger("instanceha.journal")

#: The newest revision in migrations/versions (a unit test checks it):
#: a journal at it is opened without loading alembic.
HEAD = "0003"
#: The tables of the schema before migrations: any of them without a
#: version table is a journal of an older release.
_LEGACY_TABLES = ("transitions", "actions", "evacuations")
#: Seconds a replica waits for another's upgrade to finish.
LOCK_TIMEOUT = 600
_LOCK_NAME = "instanceha_journal_upgrade"
#: PostgreSQL's advisory locks are numbered: this one's, fixed.
_PG_LOCK_KEY = 0x1a4a0011


#: Alembic's op and context are module-wide: one upgrade at a time in a
#: process (the database's lock orders the processes).
_IN_PROCESS = threading.Lock()


class UpgradeError(Exception):
    """The journal's schema could not be brought to this release's."""


def current(connection):
    """The journal's revision, or None (no version table)."""
    if not sa.inspect(connection).has_table(migrations.VERSION_TABLE):
        return None
    return connection.execute(sa.text(
        "SELECT version_num FROM %s" % migrations.VERSION_TABLE)).scalar()


def upgrade(engine):
    """Bring the journal at ``engine`` to HEAD; returns (the revision it
    was at, None for none or a journal before migrations; HEAD)."""
    with engine.connect() as c:
        before = current(c)
        c.rollback()
        if before == HEAD:
            return before, HEAD
        # Local: alembic costs ~0.1 s at import, and a journal already at
        # HEAD (every start but the first of a release) never needs it.
        from alembic import command
        from alembic.config import Config
        with _IN_PROCESS, _upgrade_lock(c):
            before = current(c)
            tables = set(sa.inspect(c).get_table_names())
            c.rollback()
            if before is None and tables.intersection(_LEGACY_TABLES):
                LOG.info("journal_schema_adopted",
                         reason="a journal made before schema migrations: "
                                "adopted at the baseline, then upgraded")
            cfg = Config()
            cfg.set_main_option("script_location",
                                os.path.dirname(migrations.__file__))
            cfg.attributes["connection"] = c
            command.upgrade(cfg, "head")
            c.commit()
            after = current(c)
            c.rollback()
    if after != HEAD:
        raise UpgradeError("the journal is at revision %s after the upgrade, "
                           "this release needs %s" % (after, HEAD))
    if before != after:
        LOG.info("journal_schema_upgraded", before=before or "none",
                 after=after, reason="this release's journal schema")
    return before, after


@contextlib.contextmanager
def _upgrade_lock(c):
    """Held on connection ``c`` (a session lock) while one replica
    upgrades; the others wait for it, then find the journal at HEAD."""
    dialect = c.dialect.name
    if dialect == "mysql":
        got = c.execute(sa.text("SELECT GET_LOCK(:n, :t)"), dict(
            n=_LOCK_NAME, t=LOCK_TIMEOUT)).scalar()
        if got != 1:
            raise UpgradeError(
                "another instanceha has been upgrading the journal for more "
                "than %ds (lock %s); try again once it is done"
                % (LOCK_TIMEOUT, _LOCK_NAME))
    elif dialect == "postgresql":
        c.execute(sa.text("SELECT pg_advisory_lock(:k)"), dict(k=_PG_LOCK_KEY))
    c.commit()
    try:
        yield
    finally:
        c.rollback()
        if dialect == "mysql":
            c.execute(sa.text("SELECT RELEASE_LOCK(:n)"), dict(n=_LOCK_NAME))
        elif dialect == "postgresql":
            c.execute(sa.text("SELECT pg_advisory_unlock(:k)"),
                      dict(k=_PG_LOCK_KEY))
        c.commit()
