"""Issue 35, part 4: a read command creates nothing. ``instanceha history
HOST``, ``status HOST`` and ``db version`` with no journal say "no
journal yet" in one line and leave no file behind (they created a 64 KB
SQLite journal, owned by whoever ran them); on a journal that exists they
read it without upgrading or changing it."""

import os

import sqlalchemy as sa

from instanceha.cmd import main as cli
from instanceha.journal import Journal
from instanceha.journal.migrations import legacy


def _conf(tmp_path, url):
    path = tmp_path / "instanceha.conf"
    path.write_text("[DEFAULT]\nstatus_file = %s\n[journal]\nconnection = "
                    "%s\n[api]\nunix_socket = %s\n" % (
                        tmp_path / "status.json", url, tmp_path / "api.sock"))
    return str(path)


def _no_journal(tmp_path, argv, capsys):
    db = tmp_path / "state" / "journal.sqlite"
    conf = _conf(tmp_path, "sqlite:///%s" % db)
    rc = cli.main(argv + ["--config-file", conf])
    out, err = capsys.readouterr()
    assert not db.exists() and not db.parent.exists(), \
        "a read command created %s" % db
    said = [line for line in (out + err).splitlines() if line]
    assert len(said) == 1 and "no journal yet" in said[0], said
    assert str(db) in said[0]
    return rc


def test_history_without_a_journal_creates_none(tmp_path, capsys):
    assert _no_journal(tmp_path, ["history", "compute-1"], capsys) == 1


def test_status_host_without_a_journal_creates_none(tmp_path, capsys):
    assert _no_journal(tmp_path, ["status", "compute-1"], capsys) == 1


def test_db_version_without_a_journal_creates_none(tmp_path, capsys):
    assert _no_journal(tmp_path, ["db", "version"], capsys) == 1


def test_a_read_leaves_an_old_journal_as_it_is(tmp_path, capsys):
    """A journal of an older release is read by nothing but ``db
    upgrade`` (and ``run``): a read says how to upgrade it and changes
    nothing."""
    db = tmp_path / "old.sqlite"
    engine = sa.create_engine("sqlite:///%s" % db)
    legacy.metadata().create_all(engine)
    engine.dispose()
    before = db.read_bytes()
    conf = _conf(tmp_path, "sqlite:///%s" % db)
    assert cli.main(["history", "compute-1", "--config-file", conf]) == 1
    err = capsys.readouterr().err
    assert "instanceha db upgrade" in err, err
    assert db.read_bytes() == before
    assert sorted(os.listdir(tmp_path)) == ["instanceha.conf", "old.sqlite"]


def test_a_read_of_a_journal_at_rest_writes_no_file(tmp_path, capsys):
    db = tmp_path / "journal.sqlite"
    Journal("sqlite:///%s" % db).close()
    before = db.read_bytes()
    conf = _conf(tmp_path, "sqlite:///%s" % db)
    assert cli.main(["history", "compute-1", "--config-file", conf]) == 1
    assert "no host 'compute-1' in the journal" in capsys.readouterr().err
    assert db.read_bytes() == before
    # Not even SQLite's -wal and -shm files (root-owned ones would stop
    # the service's user from opening its journal).
    assert sorted(os.listdir(tmp_path)) == ["instanceha.conf",
                                            "journal.sqlite"]
