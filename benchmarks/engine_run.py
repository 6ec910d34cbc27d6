"""The real ``instanceha run`` as a separate process for the benchmarks
(its CPU and memory its own), and its status file."""

import contextlib
import json
import os
import subprocess
import sys
import time


def read_status(path):
    """The engine's status file, or {} while it is absent or half
    written."""
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return {}


@contextlib.contextmanager
def engine_process(config_path, workdir):
    """Run ``instanceha run --config-file config_path`` logging to
    WORKDIR/instanceha.log; yields (process, status file path, log path)
    and stops the process on the way out."""
    status_path = os.path.join(workdir, "status.json")
    log = open(os.path.join(workdir, "instanceha.log"), "wb")
    proc = subprocess.Popen(
        [sys.executable, "-m", "instanceha.cmd.main", "run",
         "--config-file", config_path], stdout=log, stderr=subprocess.STDOUT)
    try:
        yield proc, status_path, log.name
    finally:
        proc.terminate()
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()


def wait_or_exit(pred, timeout, what, step=0.05):
    """``pred()``'s first true value within ``timeout`` seconds (polled
    every ``step``), else the benchmark stops saying what it waited for."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        value = pred()
        if value:
            return value
        time.sleep(step)
    raise SystemExit("timed out after %.0fs waiting for %s" % (timeout, what))
