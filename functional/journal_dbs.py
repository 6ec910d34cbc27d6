"""Per-test journal databases on MariaDB and PostgreSQL (and a SQLite
file): made for one test, dropped after it. A server that is not there
skips the test, or fails it under INSTANCEHA_REQUIRE_SERVICES=1."""

import contextlib
import uuid

import sqlalchemy as sa

from functional.events_fixtures import missing

SERVERS = {
    "mariadb": ("MariaDB at 127.0.0.1:3306",
                "mysql+pymysql://root@127.0.0.1:3306/%s",
                "mysql+pymysql://root@127.0.0.1:3306/"),
    "postgresql": ("PostgreSQL at 127.0.0.1:5432",
                   "postgresql+psycopg2://postgres@127.0.0.1:5432/%s",
                   "postgresql+psycopg2://postgres@127.0.0.1:5432/postgres"),
}


@contextlib.contextmanager
def database(kind, tmp_path):
    """The URL of an empty database of ``kind`` (sqlite, mariadb,
    postgresql), dropped afterwards."""
    if kind == "sqlite":
        yield "sqlite:///%s" % (tmp_path / "journal.db")
        return
    name, url_fmt, admin_url = SERVERS[kind]
    db = "iha_journal_%s" % uuid.uuid4().hex[:8]
    admin = sa.create_engine(admin_url, isolation_level="AUTOCOMMIT")
    try:
        with admin.connect() as c:
            c.execute(sa.text("CREATE DATABASE %s" % db))
    except Exception as e:
        admin.dispose()
        missing("%s is needed for this test: %s" % (name, e))
    try:
        yield url_fmt % db
    finally:
        with admin.connect() as c:
            if kind == "postgresql":
                # A journal left open by a failed test must not keep the
                # database from being dropped.
                c.execute(sa.text(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                    "WHERE datname = :d AND pid <> pg_backend_pid()"),
                    dict(d=db))
            c.execute(sa.text("DROP DATABASE %s" % db))
        admin.dispose()
