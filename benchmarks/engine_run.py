"""The real ``instanceha run`` as a separate process for the benchmarks
(its CPU and memory its own), and its status file."""

import contextlib
import json
import os
import subprocess
import sys


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
