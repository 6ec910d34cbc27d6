"""The documentation and the release notes build with warnings as errors.

The same builds as ``tox -e docs`` and ``tox -e releasenotes``
(sphinx-build -W --keep-going -b html), run with this interpreter so the
venv's Sphinx, myst-parser, reno and the oslo extensions are the ones used
(doc/requirements.txt, also in test-requirements.txt). The configuration
reference is generated from the options themselves (oslo_config.sphinxext
through the ``oslo.config.opts`` entry points), so its page must name real
options of both namespaces.
"""

import pathlib
import re
import subprocess
import sys
import time

REPO = pathlib.Path(__file__).resolve().parents[1]


def _sphinx(source, out):
    started = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-m", "sphinx", "-W", "--keep-going", "-q",
         "-b", "html", str(source), str(out)],
        cwd=REPO, capture_output=True, text=True, timeout=300)
    took = time.monotonic() - started
    assert proc.returncode == 0, (
        f"sphinx-build {source} exited {proc.returncode}\n"
        f"{proc.stdout[-4000:]}\n{proc.stderr[-8000:]}")
    return took


def test_docs_build_with_warnings_as_errors(tmp_path):
    out = tmp_path / "html"
    _sphinx(REPO / "doc" / "source", out)

    engine = (out / "configuration" / "config.html").read_text()
    # options of [detection] and [drain] from instanceha.conf.opts, each a
    # target of the oslo.config domain (id="group.option")
    for target in ("detection.poll_interval", "detection.delta",
                   "drain.concurrency", "drain.stuck_timeout"):
        assert f'id="{target}"' in engine, target
    agent = (out / "configuration" / "agent-config.html").read_text()
    for target in ("agent.engines", "agent.key_file"):
        assert f'id="{target}"' in agent, target

    policy = (out / "configuration" / "policy.html").read_text()
    assert "instanceha:host:drain" in policy

    # every Markdown page of doc/ is in the tree, the states diagram as
    # a mermaid figure, not a code block
    for md in sorted((REPO / "doc").glob("*.md")):
        assert (out / f"{md.stem}.html").is_file(), (
            f"doc/{md.name} is not in the Sphinx tree: add the include stub "
            f"doc/source/{md.name} (as the others) and a toctree entry in "
            f"doc/source/index.rst")
    states = (out / "states.html").read_text()
    assert re.search(r'<pre\s+class="mermaid">\s*stateDiagram-v2', states)
    # a cross-reference between two Markdown pages resolves to the page
    operators = (out / "operators.html").read_text()
    assert 'href="safety.html"' in operators


def test_release_notes_build_with_warnings_as_errors(tmp_path):
    out = tmp_path / "html"
    took = _sphinx(REPO / "releasenotes" / "source", out)
    assert took < 60, f"release notes took {took:.1f} s"
    text = "".join(p.read_text() for p in out.glob("*.html"))
    # reno collects the committed notes of releasenotes/notes/
    assert "Planned maintenance" in text
    assert "instanceha-agent" in text
    assert "instanceha-rules.yml" in text
