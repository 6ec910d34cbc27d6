"""The journal's schema migrations (issue 34, part 0): HEAD names the
newest revision, a journal of the release before migrations is adopted
and upgraded, and ``instanceha db upgrade`` / ``version`` say where the
journal stands. The same on MariaDB and PostgreSQL:
functional/test_journal_schema.py."""

import os

import sqlalchemy as sa
from alembic.config import Config
from alembic.script import ScriptDirectory

from instanceha.cmd import main as cli
from instanceha.journal import Journal
from instanceha.journal import migrate
from instanceha.journal import migrations
from instanceha.journal.migrations import legacy


def test_head_is_the_newest_revision():
    cfg = Config()
    cfg.set_main_option("script_location",
                        os.path.dirname(migrations.__file__))
    script = ScriptDirectory.from_config(cfg)
    assert script.get_heads() == [migrate.HEAD]
    # One line of revisions from the baseline.
    assert script.get_base() == "0001"


def test_a_legacy_sqlite_journal_is_adopted_and_kept(tmp_path):
    url = "sqlite:///%s" % (tmp_path / "old.db")
    engine = sa.create_engine(url)
    legacy.metadata().create_all(engine)
    with engine.begin() as c:
        c.execute(sa.text(
            "INSERT INTO evacuations (host_id, host_name, server_id, "
            "requested_at, status) VALUES ('u-1', 'c-1', 's-1', 5.5, "
            "'requested')"))
    engine.dispose()
    j = Journal(url)
    try:
        assert j.schema == (None, migrate.HEAD)
        assert [e["server_id"] for e in j.evacuations()] == ["s-1"]
    finally:
        j.close()
    again = Journal(url)
    try:
        assert again.schema == (migrate.HEAD, migrate.HEAD)
    finally:
        again.close()


def _conf(tmp_path, url):
    path = tmp_path / "instanceha.conf"
    path.write_text("[journal]\nconnection = %s\n" % url)
    return str(path)


def test_db_upgrade_and_version_commands(tmp_path, capsys):
    url = "sqlite:///%s" % (tmp_path / "j.db")
    conf = _conf(tmp_path, url)
    engine = sa.create_engine(url)
    legacy.metadata().create_all(engine)
    engine.dispose()
    assert cli.main(["db", "version", "--config-file", conf]) == 1
    assert "revision none (this release needs %s)" % migrate.HEAD \
        in capsys.readouterr().out
    assert cli.main(["db", "upgrade", "--config-file", conf]) == 0
    assert "upgraded from revision none to %s" % migrate.HEAD \
        in capsys.readouterr().out
    assert cli.main(["db", "upgrade", "--config-file", conf]) == 0
    assert "already at revision %s" % migrate.HEAD in capsys.readouterr().out
    assert cli.main(["db", "version", "--config-file", conf]) == 0


def test_db_upgrade_says_a_journal_it_cannot_open(tmp_path, capsys):
    conf = _conf(tmp_path, "mysql+pymysql://u:s3cret@127.0.0.1:1/j")
    assert cli.main(["db", "upgrade", "--config-file", conf]) == 1
    err = capsys.readouterr().err
    assert "instanceha: journal" in err and "s3cret" not in err
