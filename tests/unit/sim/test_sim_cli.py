"""instanceha-sim's agent flags."""

import pytest

from instanceha import simrun
from instanceha.sim import SimCloud
from instanceha.sim import __main__ as cli


def parse(*argv):
    parser = cli.build_parser()
    args = parser.parse_args(list(argv))
    return parser, args


@pytest.mark.parametrize("argv", [
    ["--agents"],
    ["--agents", "--agent-engines", "127.0.0.1:7411"],
    ["--agents", "--write-config", "d", "--agent-key-file", "k"],
])
def test_agents_need_engines_and_a_key_or_a_config_dir(argv):
    parser, args = parse(*argv)
    with pytest.raises(SystemExit):
        cli.check_agent_args(args, parser)


def test_no_agents_by_default():
    parser, args = parse()
    cli.check_agent_args(args, parser)
    assert cli.start_agents(args, SimCloud(hosts=1), parser) is None


def test_agents_with_a_generated_setup_and_faults(tmp_path, capsys):
    parser, args = parse(
        "--agents", "--write-config", str(tmp_path), "--agent-two-paths",
        "--agent-loss", "0.3", "--agent-path-down", "storage",
        "--agent-request-port", "0")
    cli.check_agent_args(args, parser)
    agents = cli.start_agents(args, SimCloud(hosts=2), parser)
    try:
        assert (tmp_path / simrun.KEY_FILE).exists()
        assert "listen_addresses = 127.0.0.1:" in capsys.readouterr().out
        assert agents.paths == simrun.TWO_PATHS
        assert agents.faults.get("compute-0", "mgmt").loss == 0.3
        assert agents.faults.get("compute-1", "storage").down is True
    finally:
        agents.stop()


def test_agents_with_given_engines_and_key(tmp_path):
    key = simrun.write_key(str(tmp_path / "k"))
    parser, args = parse(
        "--agents", "--agent-engines", "127.0.0.1:7411, 127.0.0.1:7511",
        "--agent-key-file", key, "--agent-request-port", "0",
        "--agent-clock-offset", "90")
    cli.check_agent_args(args, parser)
    agents = cli.start_agents(args, SimCloud(hosts=2), parser)
    try:
        assert agents.conf.agent.engines == ["127.0.0.1:7411",
                                             "127.0.0.1:7511"]
        assert agents.agent("compute-1").clock_offset == 90.0
        assert agents.request_port > 0
    finally:
        agents.stop()


def test_an_unknown_path_is_refused(tmp_path):
    parser, args = parse("--agents", "--write-config", str(tmp_path),
                         "--agent-path-down", "backup")
    with pytest.raises(SystemExit):
        cli.start_agents(args, SimCloud(hosts=1), parser)
