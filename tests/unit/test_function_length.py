"""No function over 80 lines in the engine and the policy (issue 36 item
8): a decision or a pass that long hides its steps; split it by what
each step does."""

import ast
import pathlib

import instanceha

LIMIT = 80
ROOTS = ("engine", "policy")


def _functions(root):
    for path in sorted(root.rglob("*.py")):
        tree = ast.parse(path.read_text(), str(path))
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                yield path, node


def test_no_function_in_engine_or_policy_is_over_80_lines():
    top = pathlib.Path(instanceha.__file__).parent
    seen = 0
    long = []
    for name in ROOTS:
        for path, node in _functions(top / name):
            seen += 1
            lines = node.end_lineno - node.lineno + 1
            if lines > LIMIT:
                long.append("%s:%d %s (%d lines)" % (
                    path.relative_to(top), node.lineno, node.name, lines))
    assert seen > 100, "no functions found under %s" % (ROOTS,)
    assert not long, "over %d lines: %s" % (LIMIT, "; ".join(long))
