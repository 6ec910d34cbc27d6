"""Render the transition table as a Mermaid state diagram (doc/states.md).

    python -m instanceha.fsm.diagram > doc/states.md
"""

from instanceha.fsm import table
from instanceha.fsm.states import ENTRY_ACTION, State


def render() -> str:
    lines = ["# Host states", "",
             "Generated from `instanceha/fsm/table.py` by "
             "`python -m instanceha.fsm.diagram`; a test keeps it current.",
             "", "```mermaid", "stateDiagram-v2", "    [*] --> active"]
    seen = set()
    for src, kind, guard, dst, _ in table.RULES:
        if src is dst or kind.value.startswith("operator_"):
            continue
        label = kind.value if guard == table.ALWAYS else \
            "%s [%s]" % (kind.value, guard)
        key = (src, dst, label)
        if key in seen:
            continue
        seen.add(key)
        lines.append("    %s --> %s: %s" % (src.value, dst.value, label))
    lines += ["```", "",
              "Operator commands (`suspend` from any state, `maintenance` "
              "from active, suspect, failed and suspended, `resume`) are "
              "left out of the picture for legibility.", "",
              "| state | action started on entry |", "|---|---|"]
    for s in State:
        action = ENTRY_ACTION.get(s)
        lines.append("| %s | %s |" % (s.value, action.value if action
                                         else "—"))
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    print(render(), end="")
