"""The journal opened for reading only, by the CLI's read commands
(``instanceha status HOST``, ``history``, ``db version``): they create
nothing, upgrade nothing and write nothing (issue 35, part 4).

A journal that does not exist is :class:`NoJournal`, never created (a
SQLite file made by a read run as root would be root's, before the
service's first start). A SQLite journal is opened with ``mode=ro``; when
no engine has it open (no ``-wal`` file) also ``immutable=1``, so that
SQLite leaves no ``-wal`` or ``-shm`` file behind either. A journal of
another release is :class:`OutOfDate`: only ``instanceha db upgrade``
(or ``run``) changes its schema.
"""

import os
import sqlite3
import urllib.parse

import sqlalchemy as sa

from instanceha.journal import migrate
from instanceha.log import mask_url


class NoJournal(Exception):
    """There is no journal at the configured place yet."""


class OutOfDate(Exception):
    """The journal's schema is not this release's."""


def where(url):
    """The journal's place for the operator: a SQLite file's path, else
    the URL with its password masked."""
    parsed = sa.engine.make_url(url)
    if parsed.drivername.startswith("sqlite") and parsed.database:
        return parsed.database
    return mask_url(url)


def engine(url):
    """A SQLAlchemy engine that only reads the journal at ``url``; raises
    NoJournal for a SQLite journal whose file does not exist (or one in
    memory, which holds nothing to read)."""
    parsed = sa.engine.make_url(url)
    if not parsed.drivername.startswith("sqlite"):
        return sa.create_engine(url, pool_pre_ping=True)
    path = parsed.database
    if not path or path == ":memory:" or not os.path.isfile(path):
        raise NoJournal("no journal yet at %s ([journal] connection): the "
                        "service writes it at its first start"
                        % (path or "an in-memory database"))
    path = os.path.abspath(path)

    def connect():
        flags = "mode=ro"
        if not os.path.exists(path + "-wal"):
            # Nobody writes it: read the file as it is, creating nothing.
            flags += "&immutable=1"
        return sqlite3.connect("file:%s?%s" % (urllib.parse.quote(path),
                                               flags),
                               uri=True, timeout=10,
                               check_same_thread=False)

    return sa.create_engine("sqlite://", creator=connect,
                            poolclass=sa.pool.NullPool)


def check(eng, url):
    """The revision of the journal behind ``eng``: this release's
    (migrate.HEAD), else NoJournal (no table at all: a database created
    for it, never written) or OutOfDate."""
    with eng.connect() as c:
        revision = migrate.current(c)
        tables = sa.inspect(c).get_table_names()
    if revision == migrate.HEAD:
        return revision
    if revision is None and not tables:
        raise NoJournal("no journal yet in %s ([journal] connection): the "
                        "service writes it at its first start" % where(url))
    raise OutOfDate("the journal %s is at schema revision %s, this release "
                    "reads %s: run 'instanceha db upgrade' (or start the "
                    "service) first" % (where(url), revision or "none",
                                        migrate.HEAD))
