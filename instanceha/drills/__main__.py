"""``python -m instanceha.drills NAME [--workdir DIR]``: run one drill.

What ``instanceha demo --scenario NAME`` runs. Exit status: 0 when the
verdict is PASS, 1 when it is FAIL, 2 for a name that is no drill.
"""

import argparse
import importlib
import os
import shutil
import sys
import tempfile
import time

from instanceha import log
from instanceha.drills import bed as bed_mod
from instanceha.drills import registry
from instanceha.drills import workdir as workdir_mod
from instanceha.drills.timeline import Timeline


def main(argv=None, out=None):
    out = out or sys.stdout
    p = argparse.ArgumentParser(prog="python -m instanceha.drills",
                                description=__doc__)
    p.add_argument("scenario", help="one of: " + ", ".join(registry.names()))
    p.add_argument("--workdir", default=None,
                   help="keep config, journal and log here (default: a "
                        "temporary directory, removed after a PASS)")
    args = p.parse_args(argv)
    scenario = registry.lookup(args.scenario)
    if scenario is None:
        print("instanceha demo: %s" % registry.unknown_text(args.scenario),
              file=sys.stderr)
        return 2
    module, func = scenario.target.split(":")
    drill_fn = getattr(importlib.import_module(
        "instanceha.drills." + module), func)
    return run(scenario, drill_fn, args.workdir, out)


def run(scenario, drill_fn, workdir, out, log_setup=log.setup):
    """Run ``drill_fn(make)`` and print its verdict; 0 on PASS. The
    engine's log goes to instanceha.log in ``workdir`` (``log_setup``
    points the process's logging there)."""
    own = workdir is None
    workdir = workdir or tempfile.mkdtemp(prefix="instanceha-drill-")
    os.makedirs(workdir, exist_ok=True)
    logfile = open(os.path.join(workdir, "instanceha.log"), "w")
    log_setup("console", False, stream=logfile)
    out.write("instanceha drill %s: %s\n" % (scenario.name, scenario.summary))
    timeline = Timeline(out)
    drills = []

    def make(overrides=None, **params):
        """A started Drill in ``workdir``: the cloud, the engine."""
        d = bed_mod.Drill(timeline, workdir, overrides, temporary=own,
                          **params)
        drills.append(d)
        return d.start()

    started = time.monotonic()
    verdict = None
    try:
        verdict = "PASS: " + drill_fn(make)
    except bed_mod.DrillFailed as e:
        verdict = "FAIL: %s" % e
    except Exception as e:          # the verdict, not a traceback alone
        import traceback
        traceback.print_exc(file=logfile)
        verdict = "FAIL: the drill broke: %s: %s" % (type(e).__name__, e)
    finally:
        for d in drills:
            try:
                d.close()
            except Exception as e:
                out.write("(stopping the drill: %s)\n" % e)
        logfile.close()
    took = time.monotonic() - started
    passed = verdict.startswith("PASS")
    if passed and own:
        shutil.rmtree(workdir, ignore_errors=True)
    out.write(workdir_mod.end_line(workdir, own, passed))
    out.write("%s (%s, %.1fs)\n" % (verdict, scenario.name, took))
    out.flush()
    return 0 if passed else 1


if __name__ == "__main__":
    sys.exit(main())
