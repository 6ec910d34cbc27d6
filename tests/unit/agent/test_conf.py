"""The agent's options: help on each, checks across options, address and
path parsing, and the committed sample being current."""

import os
import subprocess
import sys

from oslo_config import cfg
import pytest

from instanceha import conf as engine_conf
from instanceha.conf import agent as agent_conf
from tests.unit.agent import helpers

TOP = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))))


def test_every_option_has_help():
    for group, opts in agent_conf.list_opts():
        assert group == "agent"
        for opt in opts:
            assert opt.help and len(opt.help) > 20, opt.name


def test_the_engine_does_not_register_the_agents_options():
    assert agent_conf not in engine_conf.MODULES


def test_sample_is_current(tmp_path):
    out = tmp_path / "agent.conf"
    subprocess.run(
        [sys.executable, "-m", "oslo_config.generator", "--namespace",
         "instanceha.agent", "--wrap-width", "79", "--output-file",
         str(out)], check=True, cwd=TOP)
    committed = open(os.path.join(TOP, "etc", "instanceha",
                                  "instanceha-agent.conf.sample")).read()
    assert out.read_text() == committed, (
        "etc/instanceha/instanceha-agent.conf.sample is stale: run "
        "oslo-config-generator --config-file "
        "etc/oslo-config-generator/instanceha-agent.conf")


@pytest.mark.parametrize("text,expected", [
    ("192.0.2.1:7411", ("192.0.2.1", 7411)),
    ("engine.example:9", ("engine.example", 9)),
    ("[2001:db8::1]:7411", ("2001:db8::1", 7411)),
    ("192.0.2.1", ("192.0.2.1", 7411)),
    ("2001:db8::1", ("2001:db8::1", 7411)),
])
def test_split_address(text, expected):
    assert agent_conf.split_address(text, 7411) == expected


@pytest.mark.parametrize("text", ["192.0.2.1", "h:port", "h:70000", ":1",
                                  "[::1", "[::1]x"])
def test_split_address_refuses(text):
    with pytest.raises(ValueError):
        agent_conf.split_address(text)


def test_parse_paths():
    assert agent_conf.parse_paths([]) == [("default", None)]
    assert agent_conf.parse_paths(
        ["mgmt=192.0.2.11", "storage=[2001:db8::2]", "any="]) == [
        ("mgmt", "192.0.2.11"), ("storage", "2001:db8::2"), ("any", None)]


@pytest.mark.parametrize("paths", [["mgmt"], ["=1.2.3.4"], ["a b=1.2.3.4"],
                                   ["m=1.2.3.4", "m=1.2.3.5"]])
def test_parse_paths_refuses(paths):
    with pytest.raises(ValueError):
        agent_conf.parse_paths(paths)


@pytest.mark.parametrize("overrides,message", [
    (dict(engines=[]), "engines: must list"),
    (dict(engines=["h:x"]), "engines"),
    (dict(control_addresses=["192.0.2.5"]), "control_addresses"),
    (dict(paths=["mgmt"]), "paths"),
    (dict(restart_compute=True), "needs [agent] control_addresses"),
])
def test_validate_names_the_option(overrides, message):
    with pytest.raises(cfg.Error, match=message.replace("[", r"\[")):
        agent_conf.validate(helpers.make_conf(**overrides))


def test_a_good_configuration_validates():
    agent_conf.validate(helpers.make_conf(
        paths=["mgmt=192.0.2.11"], control_addresses=["192.0.2.11:7412"],
        restart_compute=True))
