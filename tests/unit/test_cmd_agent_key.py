"""``instanceha agent-key HOST --output FILE``: one host's key, derived
from the engines' master key, written mode 0600 for the deployment tool;
the agent loads it and the engine verifies its beats."""

import os
import stat

from instanceha.cmd import main
from instanceha.heartbeat import keys
from instanceha.heartbeat import protocol
from tests.unit.heartbeat import helpers

MASTER_SECRET = b"M" * 40


def master_file(tmp_path, name="master.key", secret=MASTER_SECRET):
    return helpers.write_key(tmp_path / name, secret)


def write_engine_conf(tmp_path, **agent):
    lines = ["[agent]"] + ["%s = %s" % kv for kv in agent.items()]
    path = tmp_path / "instanceha.conf"
    path.write_text("\n".join(lines) + "\n")
    return path


def test_writes_the_hosts_key_mode_0600_from_the_engines_config(
        tmp_path, capsys):
    master = master_file(tmp_path)
    conf = write_engine_conf(tmp_path, master_key_file=master)
    out = tmp_path / "compute-7.key"
    assert main.main(["agent-key", "compute-7", "--output", str(out),
                      "--config-file", str(conf)]) == 0
    assert stat.S_IMODE(os.stat(out).st_mode) == 0o600
    key = keys.load_key(out)
    master_key = keys.Key.from_secret(MASTER_SECRET)
    assert (key.host, key.secret) == (
        "compute-7", keys.derive_host_key(master_key, "compute-7").secret)
    err = capsys.readouterr().err
    assert key.kid in err and master_key.kid in err
    assert key.secret.hex() not in err
    # The engine holding the master verifies the agent's beats.
    ring = keys.HostKeyring(master_key)
    ring.learn(["compute-7"])
    data = protocol.encode_beat(helpers.beat(host="compute-7"), key)
    assert protocol.decode(data, ring).host == "compute-7"
    # An existing file is kept unless --force.
    assert main.main(["agent-key", "compute-7", "--output", str(out),
                      "--master-key-file", str(master)]) == 1
    assert "exists" in capsys.readouterr().err
    assert main.main(["agent-key", "compute-7", "--output", str(out),
                      "--master-key-file", str(master), "--force"]) == 0
    assert [p.name for p in tmp_path.iterdir()
            if p.name.startswith(".agent-key-")] == []


def test_previous_master_for_a_rotation_and_stdout(tmp_path, capsys):
    old = master_file(tmp_path, "old.key", b"O" * 40)
    conf = write_engine_conf(tmp_path, master_key_file=master_file(tmp_path),
                             previous_master_key_file=old)
    assert main.main(["agent-key", "compute-1", "--output", "-",
                      "--previous", "--config-file", str(conf)]) == 0
    line = capsys.readouterr().out
    expected = keys.derive_host_key(keys.Key.from_secret(b"O" * 40),
                                    "compute-1")
    assert line == keys.host_key_line(expected)


def test_without_a_master_key_it_says_so(tmp_path, capsys):
    conf = write_engine_conf(tmp_path)
    assert main.main(["agent-key", "compute-1", "--output",
                      str(tmp_path / "k"), "--config-file", str(conf)]) == 2
    assert "master_key_file is not set" in capsys.readouterr().err
    assert not (tmp_path / "k").exists()
    # A host key given as the master is refused.
    host_key = tmp_path / "h"
    host_key.write_text(keys.host_key_line(keys.derive_host_key(
        keys.Key.from_secret(MASTER_SECRET), "x")))
    host_key.chmod(0o600)
    assert main.main(["agent-key", "compute-1", "--output", "-",
                      "--master-key-file", str(host_key)]) == 2
    assert "speaks for one host" in capsys.readouterr().err
