"""doc/architecture.md stays true to the code (issue 36 part 7): every
module under instanceha/engine/ is named in it, every action declared in
fsm/states.py ACTIONS is listed, and every `engine/<module>.py` it names
exists."""

import pathlib
import re

from instanceha.fsm.states import ACTIONS

TOP = pathlib.Path(__file__).resolve().parents[2]
DOC = (TOP / "doc" / "architecture.md").read_text()
ENGINE = TOP / "instanceha" / "engine"


def _modules():
    return sorted(p.name for p in ENGINE.glob("*.py")
                  if p.name != "__init__.py")


def test_every_engine_module_is_named():
    missing = [m for m in _modules()
               if not re.search(r"`(engine/)?%s`" % re.escape(m), DOC)]
    assert missing == [], (
        "doc/architecture.md does not name these engine modules (add a "
        "row to 'Inside the engine'): %s" % ", ".join(missing))


def test_every_action_is_listed():
    missing = [a.value for a in ACTIONS
               if not re.search(r"`%s`" % re.escape(a.value), DOC)]
    assert missing == [], (
        "doc/architecture.md does not list these actions: %s"
        % ", ".join(missing))


def test_every_engine_module_it_names_exists():
    named = set(re.findall(r"engine/(\w+\.py)", DOC))
    assert named - set(_modules()) == set()
