"""simrun's agents switch: a key file, free ports, the engine's [agent]
options; off by default."""

import configparser
import os
import stat

from instanceha import simrun
from instanceha.heartbeat import keys


class StubServer:
    def write_client_files(self, workdir):
        return (os.path.join(workdir, "clouds.yaml"),
                os.path.join(workdir, "bmc.yaml"))


def read(path):
    parser = configparser.RawConfigParser()
    parser.read(path)
    return parser


def test_agents_are_off_by_default(tmp_path):
    path = simrun.write_config(str(tmp_path), StubServer())
    assert not read(path).has_section("agent")
    assert not (tmp_path / simrun.KEY_FILE).exists()


def test_agent_setup_writes_a_private_key_and_the_engines_options(tmp_path):
    setup = simrun.agent_setup(str(tmp_path))
    mode = stat.S_IMODE(os.stat(setup.key_file).st_mode)
    assert mode == 0o600
    keyring = keys.load_keyring(setup.key_file)    # a valid key file
    path = simrun.write_config(str(tmp_path), StubServer(), agents=setup)
    parser = read(path)
    agent = {k: parser.get("agent", k) for k in parser.options("agent")
             if not parser.has_option("DEFAULT", k)}
    assert agent == {
        "listen_addresses": "127.0.0.1:%d" % setup.listen_port,
        "key_file": setup.key_file,
        "request_port": str(setup.request_port)}
    args = setup.sim_args()
    assert args["engines"] == ["127.0.0.1:%d" % setup.listen_port]
    assert args["paths"] == {"mgmt": "127.0.0.1"}
    assert args["keyring"].kids == keyring.kids
    assert args["request_port"] == setup.request_port


def test_two_paths_and_a_new_key_each_time(tmp_path):
    first = simrun.agent_setup(str(tmp_path))
    old = keys.load_key(first.key_file)
    os.chmod(first.key_file, 0o644)
    second = simrun.agent_setup(str(tmp_path), two_paths=True,
                                interval=0.5)
    assert second.paths == {"mgmt": "127.0.0.1", "storage": "127.0.0.2"}
    assert second.interval == 0.5
    assert stat.S_IMODE(os.stat(second.key_file).st_mode) == 0o600
    assert keys.load_key(second.key_file).kid != old.kid
