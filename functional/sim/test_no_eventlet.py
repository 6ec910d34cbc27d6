"""The real ``instanceha run`` process never loads eventlet: run under
PYTHONVERBOSE, Python names every module file it executes, and no
eventlet file is among them while the engine recovers a host."""

import os
import re


def test_engine_process_recovers_a_host_without_loading_eventlet(make_cloud):
    c = make_cloud(hosts=3, servers_per_host=1)
    c.engine.start(len(c.sim.hosts), timeout=60,
                   env=dict(os.environ, PYTHONVERBOSE="1"))
    c.sim.kill("compute-1")
    c.wait_state("compute-1", "evacuated", timeout=60)
    c.stop_engine()
    log = c.engine.log_text()
    # PYTHONVERBOSE took effect: the engine's own modules are listed.
    assert re.search(r"instanceha[/\\]engine[/\\]", log), log[:2000]
    executed = re.findall(r"code object from '([^']*)'", log)
    assert executed, log[:2000]
    assert [f for f in executed if re.search(r"[/\\]eventlet[/\\]", f)] \
        == []
    assert "Eventlet is deprecated" not in log
    # The import trace names files such as the standard library's
    # secrets.py: keep only the engine's own lines for the suite's grep
    # for configured secrets in logs.
    with open(c.engine.log_path, "w") as f:
        f.writelines(line for line in log.splitlines(True)
                     if not line.startswith(("# ", "import ", "#  ")))
