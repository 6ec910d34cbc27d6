"""The committed sample config is what the generator writes today."""

import os
import subprocess
import sys

TOP = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(
    __file__))))


def test_sample_is_current(tmp_path):
    out = tmp_path / "sample.conf"
    subprocess.run(
        [sys.executable, "-m", "oslo_config.generator", "--namespace",
         "instanceha", "--wrap-width", "79", "--output-file", str(out)],
        check=True, cwd=TOP)
    committed = open(os.path.join(TOP, "etc", "instanceha",
                                  "instanceha.conf.sample")).read()
    assert out.read_text() == committed, (
        "etc/instanceha/instanceha.conf.sample is stale: run "
        "'tox -e genconfig' (or oslo-config-generator --config-file "
        "etc/oslo-config-generator/instanceha.conf) and commit the result")


def test_every_option_has_help():
    from instanceha.conf import opts
    for group, options in opts.list_opts():
        for opt in options:
            assert opt.help and len(opt.help) > 20, (group, opt.name)
