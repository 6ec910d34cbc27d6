"""What README.md and doc/*.md point an operator at exists (issue 35,
part 7): the README has a section for each thing an operator runs, each
linking to its page; every relative link of the README and the pages
names a file of the tree; every ```[group] option``` they name is an
option of instanceha's configuration (engine or agent), or one of the
other services' options listed here."""

import glob
import os
import re

import pytest

from instanceha.conf import agent as agent_conf
from instanceha.conf import opts as engine_opts

TOP = os.path.normpath(os.path.join(os.path.dirname(__file__), "..", ".."))
README = os.path.join(TOP, "README.md")
PAGES = sorted(glob.glob(os.path.join(TOP, "doc", "*.md")))

#: README heading -> what that section must link to or name.
SECTIONS = {
    "The heartbeat agent": ["doc/agent.md", "[agent] listen_addresses",
                            "instanceha agent-key"],
    "Instance repair": ["doc/instance-repair.md",
                        "[instance_repair] enabled"],
    "Drain and maintenance": ["doc/maintenance.md", "doc/drain.md",
                              "instanceha drain HOST"],
    "`openstack instanceha`": ["doc/osc.md"],
    "Alerts and dashboard": ["etc/prometheus/instanceha-rules.yml",
                             "etc/grafana/instanceha-dashboard.json",
                             "doc/operators.md"],
    "Documentation": ["tox -e docs", "tox -e releasenotes"],
}
#: Options of other services the pages name as ``[group] option``.
FOREIGN = {
    ("DEFAULT", "host"),                           # nova.conf
    ("DEFAULT", "sync_power_state_interval"),      # nova.conf
    ("notifications", "notify_on_state_change"),   # nova.conf
    ("oslo_messaging_rabbit", "rabbit_retry_interval"),
    ("token", "expiration"),                       # keystone.conf
}


def _read(path):
    with open(path) as f:
        return f.read()


def _sections(text):
    """{heading: its text} of the ``## `` sections."""
    parts = re.split(r"^## (.+)$", text, flags=re.M)
    return dict(zip(parts[1::2], parts[2::2]))


@pytest.mark.parametrize("heading", sorted(SECTIONS))
def test_the_readme_has_a_section_for_it(heading):
    sections = _sections(_read(README))
    assert heading in sections, sorted(sections)
    body = " ".join(sections[heading].split())     # lines joined
    for needed in SECTIONS[heading]:
        assert needed in body, (heading, needed)
        if "/" in needed and " " not in needed:
            assert os.path.isfile(os.path.join(TOP, needed)), needed


def test_the_docs_build_the_readme_names_exists():
    assert "[testenv:docs]" in _read(os.path.join(TOP, "tox.ini"))
    assert "[testenv:releasenotes]" in _read(os.path.join(TOP, "tox.ini"))


def test_every_relative_link_names_a_file():
    broken = []
    for path in [README] + PAGES:
        for target in re.findall(r"\]\(([^)\s]+)\)", _read(path)):
            if re.match(r"[a-z]+:", target) or target.startswith("#"):
                continue
            name = target.split("#")[0]
            where = os.path.join(os.path.dirname(path), name)
            if not os.path.exists(where):
                broken.append("%s: %s" % (os.path.relpath(path, TOP),
                                          target))
    assert broken == []


def _known_options():
    known = {}
    for list_opts in (engine_opts.list_opts, agent_conf.list_opts):
        for group, opts in list_opts():
            name = getattr(group, "name", group) or "DEFAULT"
            known.setdefault(name, set()).update(o.dest for o in opts)
    return known


def test_every_option_the_docs_name_exists():
    known = _known_options()
    unknown = []
    for path in [README] + PAGES:
        for group, option in re.findall(
                r"`\[([a-z_]+|DEFAULT)\]\s+([a-z_][a-z0-9_]*)", _read(path)):
            if (group, option) in FOREIGN:
                continue
            if option not in known.get(group, ()):
                unknown.append("%s: [%s] %s" % (os.path.relpath(path, TOP),
                                                group, option))
    assert unknown == []
