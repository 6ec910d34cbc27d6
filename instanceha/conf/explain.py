"""Configuration errors as one line an operator can act on: the file, the
option (``[group] name = value``) and what to give instead, never
oslo.config's internals (``LocationInfo(...)``) nor a traceback.

Shared by the engine's configuration (:func:`instanceha.conf.load`) and
the agent's (:func:`instanceha.agent.main.load_conf`).
"""

import glob
import os
import re

from oslo_config import cfg
from oslo_config import types

#: a value with a ``#`` after blank space: oslo.config keeps it as part of
#: the value (it strips no inline comment)
INLINE_COMMENT = re.compile(r"\s#")
COMMENT_FIX = "inline comments are not allowed; put the comment on its " \
    "own line"


def config_files(conf):
    """The files oslo.config read: --config-file (or the default files) and
    the *.conf files of --config-dir, in its order."""
    files = list(conf.config_file or [])
    dirs = conf.config_dir or []
    for directory in [dirs] if isinstance(dirs, str) else dirs:
        files.extend(sorted(glob.glob(os.path.join(directory, "*.conf"))))
    return [f for f in files if os.path.isfile(f)]


def _whoami():
    return "uid %d" % os.geteuid()


def unreadable(path, e, what="configuration file"):
    """One line for a file that cannot be read (``e``: its OSError)."""
    if isinstance(e, IsADirectoryError) or os.path.isdir(path):
        return ("%s: is a directory, not a %s: give a file (or "
                "--config-dir %s for the *.conf files in it)"
                % (path, what, path))
    if isinstance(e, PermissionError):
        return ("%s: permission denied: make the %s readable by the "
                "service's user (this process runs as %s)"
                % (path, what, _whoami()))
    if isinstance(e, FileNotFoundError):
        return "%s: no such file: give the path of an existing %s" % (
            path, what)
    return "%s: cannot read the %s: %s" % (path, what,
                                           getattr(e, "strerror", None) or e)


def parse(conf, **kwargs):
    """``conf(**kwargs)`` (the command line and config files), its errors
    raised as cfg.Error of one line."""
    try:
        conf(**kwargs)
    except cfg.ConfigFilesPermissionDeniedError as e:
        path = ",".join(e.config_files)
        raise cfg.Error(unreadable(path, PermissionError()))
    except cfg.ConfigFilesNotFoundError as e:
        path = ",".join(e.config_files)
        raise cfg.Error(unreadable(path, FileNotFoundError()))
    except cfg.ConfigFileParseError as e:
        raise cfg.Error("%s: not a configuration file oslo.config can "
                        "parse: %s (lines are [group] headers, name = value "
                        "and # comments)" % (e.config_file, e.msg))
    except OSError as e:
        raise cfg.Error(unreadable(e.filename or "--config-file", e))


def describe(kind):
    """What an oslo.config type takes, for the operator: ``an integer
    from 0 to 65535``, ``one of noauth, keystone``, ``true or false``."""
    choices = getattr(kind, "choices", None)
    if choices:
        return "one of %s" % ", ".join(str(c) for c in choices)
    if isinstance(kind, types.Boolean):
        return "true or false"
    if isinstance(kind, (types.Integer, types.Float)):
        noun = "an integer" if isinstance(kind, types.Integer) \
            else "a number"
        low, high = kind.min, kind.max
        if low is not None and high is not None:
            return "%s from %s to %s" % (noun, low, high)
        if low is not None:
            return "%s of at least %s" % (noun, low)
        if high is not None:
            return "%s of at most %s" % (noun, high)
        return noun
    if isinstance(kind, types.List):
        return "a comma-separated list of %s" % describe(kind.item_type)
    if isinstance(kind, types.Dict):
        return "comma-separated key:value pairs"
    if isinstance(kind, (types.HostAddress, types.HostDomain)):
        return "an IP address or host name"
    if isinstance(kind, types.IPAddress):
        return "an IP address"
    return "a valid %s" % getattr(kind, "type_name", "value")


def raw_values(path):
    """{group (oslo.config's key): {name: last raw value}} of one file."""
    sections = {}
    cfg.ConfigParser(path, sections).parse()
    return {group: {name: values[-1] for name, values in opts.items()}
            for group, opts in sections.items()}


def _raw(conf, group, opt):
    """(file, raw text) of the value the config files give ``opt`` (the
    last file that sets it wins), or (None, None)."""
    key = group if group == "DEFAULT" else group.lower()
    for path in reversed(config_files(conf)):
        try:
            sections = raw_values(path)
        except (OSError, cfg.ParseError):
            continue
        for section, values in sections.items():
            if (section if section == "DEFAULT" else section.lower()) != key:
                continue
            for name in (opt.name, opt.dest):
                if name in values:
                    return path, values[name]
    return None, None


def bad_value(conf, group, opt, error):
    """One line for ``opt`` of ``group`` whose value ``error`` rejected:
    ``FILE: [group] name = value: why; give ...``."""
    path, raw = _raw(conf, group, opt)
    if raw is None:
        reason = str(error).split(" is not valid: ")[-1]
        return "[%s] %s: %s: give %s" % (group, opt.name, reason,
                                         describe(opt.type))
    where = "%s: [%s] %s = %s" % (path, group, opt.name, raw)
    if INLINE_COMMENT.search(raw):
        return "%s: %s" % (where, COMMENT_FIX)
    return "%s: not valid: give %s" % (where, describe(opt.type))


def check_values(conf, group, opts):
    """Read every option of ``group`` now; the first bad value raises
    cfg.Error of one line."""
    section = conf if group == "DEFAULT" else conf[group]
    for opt in opts:
        try:
            getattr(section, opt.dest)
        except (cfg.ConfigFileValueError, ValueError) as e:
            raise cfg.Error(bad_value(conf, group, opt, e))


def inline_comment(path, group, opt, raw):
    """One line when the raw value ``raw`` of a (non-secret) option holds
    an inline comment, else None."""
    if opt.secret or not isinstance(raw, str) \
            or not INLINE_COMMENT.search(raw):
        return None
    return "%s: [%s] %s = %s: %s" % (path, group, opt.name, raw,
                                      COMMENT_FIX)
