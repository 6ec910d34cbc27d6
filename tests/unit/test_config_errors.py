"""Every configuration error is one line naming the file, the option or
field, and what to do (issue 35, part 3): for ``instanceha run`` and
``check`` (exit 2) and the agent, whose configuration loads through the
same code."""

import logging
import os
import warnings

import pytest
import yaml

from instanceha import conf as conf_pkg
from instanceha.agent import main as agent_main
from instanceha.cmd import check
from instanceha.cmd import run as run_cmd
from instanceha.drivers import fencing as fencing_pkg
from instanceha.drivers.fencing import inventory as inventory_mod
from oslo_config import cfg


def _conf_file(tmp_path, text, name="instanceha.conf"):
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def _load_error(argv):
    with pytest.raises(cfg.Error) as e:
        conf_pkg.load(argv)
    return str(e.value)


def _one_line(text):
    assert "\n" not in text.strip(), text
    assert "LocationInfo" not in text and "Locations." not in text, text
    return text


def run_main(argv, capsys):
    """(exit status, stderr) of ``instanceha run`` with ``argv``, the
    root logger as it was before (run's log set-up)."""
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    try:
        code = run_cmd.main(list(argv))
    except SystemExit as e:
        code = e.code
    finally:
        # run's log set-up wrote to capsys's stream: put the test's back.
        root.handlers[:] = handlers
        root.setLevel(level)
    return code, capsys.readouterr().err


# -- oslo.config's values -----------------------------------------------------

def test_a_wrong_type_names_the_file_the_option_and_what_to_give(tmp_path):
    path = _conf_file(tmp_path, "[DEFAULT]\nworkers = abc\n")
    text = _one_line(_load_error(["--config-file", path]))
    assert text.startswith("%s: [DEFAULT] workers = abc: " % path), text
    assert "give an integer from 1 to 256" in text, text


def test_a_value_out_of_range_says_the_range(tmp_path):
    path = _conf_file(tmp_path, "[api]\nport = 70000\n")
    text = _one_line(_load_error(["--config-file", path]))
    assert text.startswith("%s: [api] port = 70000: " % path), text
    assert "an integer from 0 to 65535" in text, text


def test_a_bad_choice_lists_the_choices(tmp_path):
    path = _conf_file(tmp_path, "[api]\nauth_strategy = ldap\n")
    text = _one_line(_load_error(["--config-file", path]))
    assert "[api] auth_strategy = ldap" in text
    assert "one of noauth, keystone" in text, text


def test_an_inline_comment_is_named_as_the_cause(tmp_path):
    path = _conf_file(tmp_path, "[policy]\nthreshold = 10   # hosts\n")
    text = _one_line(_load_error(["--config-file", path]))
    assert text.startswith("%s: [policy] threshold" % path), text
    assert "inline comments are not allowed; put the comment on its own " \
        "line" in text, text


def test_an_inline_comment_on_a_text_option_is_refused_too(tmp_path):
    # A path would silently end in " # comment".
    path = _conf_file(tmp_path, "[fencing]\ninventory = /etc/x.yaml # BMCs\n")
    text = _one_line(_load_error(["--config-file", path]))
    assert "[fencing] inventory" in text
    assert "inline comments are not allowed" in text


def test_a_directory_as_config_file_is_one_line_and_exit_2(tmp_path, capsys):
    code, err = run_main(["--config-file", str(tmp_path)], capsys)
    assert code == 2, err
    line = _one_line(err)
    assert "Traceback" not in err
    assert str(tmp_path) in line and "is a directory" in line, line
    assert "--config-dir" in line, line
    report = check.run(["--config-file", str(tmp_path)])
    assert report.exit_code == 2
    assert "is a directory" in report.render()


def test_a_missing_config_file_names_it(tmp_path):
    path = str(tmp_path / "nope.conf")
    text = _one_line(_load_error(["--config-file", path]))
    assert path in text and "no such file" in text, text


def _as_nobody(fn):
    """``fn()``'s result (text) computed in a child process that dropped
    to uid/gid 65534, so that a mode-000 file really is unreadable even
    when the tests run as root."""
    r, w = os.pipe()
    with warnings.catch_warnings():
        # Python 3.12+ warns of a fork beside threads (xdist's): the child
        # only runs ``fn`` and exits.
        warnings.simplefilter("ignore", DeprecationWarning)
        pid = os.fork()
    if pid == 0:     # pragma: no cover - the child
        try:
            os.close(r)
            if os.geteuid() == 0:
                os.setgroups([])
                os.setgid(65534)
                os.setuid(65534)
            try:
                text = fn()
            except BaseException as e:   # noqa: BLE001
                text = "%s: %s" % (type(e).__name__, e)
            os.write(w, text.encode())
        finally:
            os._exit(0)
    os.close(w)
    with os.fdopen(r) as f:
        text = f.read()
    os.waitpid(pid, 0)
    return text


def test_an_unreadable_config_file_says_permission_denied(tmp_path):
    os.chmod(tmp_path, 0o755)
    path = _conf_file(tmp_path, "[DEFAULT]\nworkers = 2\n")
    conf_pkg.load(["--config-file", path])      # imports done here
    os.chmod(path, 0)

    def load():
        try:
            conf_pkg.load(["--config-file", path])
        except cfg.Error as e:
            return str(e)
        return "loaded"
    text = _one_line(_as_nobody(load))
    assert path in text and "permission denied" in text, text
    assert "readable by" in text, text


def test_an_unreadable_inventory_says_permission_denied(tmp_path):
    os.chmod(tmp_path, 0o755)
    path = tmp_path / "bmc.yaml"
    path.write_text(yaml.safe_dump({"hosts": {"c": {"driver": "noop"}}}))
    os.chmod(path, 0)

    def read():
        try:
            inventory_mod.read(str(path), fencing_pkg.FIELDS)
        except inventory_mod.InventoryError as e:
            return str(e)
        return "read"
    text = _one_line(_as_nobody(read))
    assert str(path) in text and "permission denied" in text, text
    assert "[fencing] inventory" in text, text


# -- clouds.yaml ---------------------------------------------------------------

def test_a_missing_clouds_file_names_its_path(tmp_path):
    from instanceha.drivers.compute import base
    from instanceha.drivers.compute.nova import NovaDriver
    missing = str(tmp_path / "clouds.yaml")
    conf = conf_pkg.make({"DEFAULT": {"cloud": "sim",
                                      "clouds_file": missing}})
    with pytest.raises(base.ComputeError) as e:
        NovaDriver(conf)
    text = _one_line(str(e.value))
    assert missing in text and "[DEFAULT] clouds_file" in text, text


# -- the inventory -------------------------------------------------------------

def _inventory(tmp_path, hosts):
    path = tmp_path / "bmc.yaml"
    path.write_text(yaml.safe_dump({"hosts": hosts}))
    os.chmod(path, 0o600)
    return str(path)


def test_an_entry_without_any_password_source_is_an_error(tmp_path):
    path = _inventory(tmp_path, {"compute-0": {
        "driver": "redfish", "address": "https://bmc-0",
        "username": "admin"}})
    with pytest.raises(inventory_mod.InventoryError) as e:
        inventory_mod.read(path, fencing_pkg.FIELDS)
    text = _one_line(str(e.value))
    assert "host compute-0" in text and "password_file" in text, text
    assert path in text, text


def test_every_inventory_error_is_reported_in_one_run(tmp_path, capsys):
    path = _inventory(tmp_path, {
        "compute-0": {"driver": "redfish", "address": "https://bmc-0",
                      "username": "admin"},
        "compute-1": {"driver": "nosuch", "address": "x"},
        "compute-2": {"driver": "ipmi", "username": "admin",
                      "password": "pw"},
        "compute-3": {"driver": "redfish", "address": "https://bmc-3",
                      "password": "pw"}})
    with pytest.raises(inventory_mod.InventoryError) as e:
        inventory_mod.read(path, fencing_pkg.FIELDS)
    lines = e.value.errors
    assert len(lines) == 3, lines
    for host in ("compute-0", "compute-1", "compute-2"):
        assert any("host %s" % host in line for line in lines), lines
    conf_path = _conf_file(tmp_path, "[DEFAULT]\nstatus_file =\n"
                           "[api]\nenabled = false\n"
                           "[fencing]\ninventory = %s\n" % path)
    code, err = run_main(["--config-file", conf_path], capsys)
    assert code == 2
    assert len(err.splitlines()) == 3, err


# -- the agent shares the loading code ----------------------------------------

def test_the_agent_says_a_bad_value_in_one_line(tmp_path, capsys):
    path = _conf_file(tmp_path, "[agent]\nengines = 127.0.0.1\n"
                      "interval = fast\n", name="agent.conf")
    code = agent_main.main(["--config-file", path])
    err = capsys.readouterr().err
    assert code == 2
    line = _one_line(err)
    assert "%s: [agent] interval = fast" % path in line, line


def test_the_agent_says_a_directory_config_file_in_one_line(tmp_path,
                                                            capsys):
    code = agent_main.main(["--config-file", str(tmp_path)])
    err = capsys.readouterr().err
    assert code == 2
    assert "is a directory" in _one_line(err)
