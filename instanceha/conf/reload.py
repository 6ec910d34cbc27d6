"""Re-read the configuration files of a running service (SIGHUP).

The files are first loaded into a fresh ConfigOpts with every check the
start runs (unknown options, bounds, cross-option validation): a file that
would not start the service changes nothing. Then oslo.config's
``mutate_config_files()`` applies the options declared ``mutable=True``
(intervals, thresholds, recovery policy); a changed option that is not
mutable keeps the value in use and is reported, since applying it needs a
restart (a socket to re-bind, a journal to re-open, a pool to resize).
"""

import dataclasses
import logging
from typing import List, Optional, Tuple

from oslo_config import cfg

from instanceha import conf as conf_pkg

#: (group, option name, value in use, value in the file, secret)
Change = Tuple[str, str, object, object, bool]


@dataclasses.dataclass
class Outcome:
    ok: bool
    error: Optional[str] = None
    applied: List[Change] = dataclasses.field(default_factory=list)
    ignored: List[Change] = dataclasses.field(default_factory=list)
    files: List[str] = dataclasses.field(default_factory=list)


def config_args(conf):
    """The --config-file / --config-dir arguments ``conf`` was loaded
    with, to load the same files again."""
    args = []
    for path in conf.config_file or []:
        args += ["--config-file", path]
    dirs = conf.config_dir or []
    for directory in [dirs] if isinstance(dirs, str) else dirs:
        args += ["--config-dir", directory]
    return args


def diff(old, new):
    """Every instanceha option whose value differs between two confs,
    split into (mutable, immutable) lists of :data:`Change`."""
    mutable, immutable = [], []
    for module in conf_pkg.MODULES:
        for group, opts in module.list_opts().items():
            a = old if group == "DEFAULT" else old[group]
            b = new if group == "DEFAULT" else new[group]
            for opt in opts:
                before, after = getattr(a, opt.dest), getattr(b, opt.dest)
                if before == after:
                    continue
                change = (group, opt.name, before, after, bool(opt.secret))
                (mutable if opt.mutable else immutable).append(change)
    return mutable, immutable


def describe(changes):
    """``group.option: old -> new`` for each change; a secret option's
    values are never shown."""
    parts = []
    for group, name, before, after, secret in changes:
        if secret:
            parts.append("%s.%s: (secret changed)" % (group, name))
        else:
            parts.append("%s.%s: %r -> %r" % (group, name, before, after))
    return "; ".join(parts)


def reload(conf, load=conf_pkg.load):
    """Re-read ``conf``'s files; apply the mutable changes. Returns an
    :class:`Outcome`; never raises for a bad file (``ok`` False, the
    configuration in use unchanged)."""
    args = config_args(conf)
    files = conf_pkg.config_files(conf)
    if not args:
        return Outcome(ok=True, files=files)
    try:
        fresh = load(args, default_config_files=[])
    except (cfg.Error, ValueError, OSError) as e:
        return Outcome(ok=False, error=str(e), files=files)
    applied, ignored = diff(conf, fresh)
    if applied:
        # oslo.config also logs each ignored immutable change through the
        # standard library; ours (with the option names) is the one line.
        quiet = logging.getLogger("oslo_config.cfg")
        level = quiet.level
        quiet.setLevel(logging.ERROR)
        try:
            conf.mutate_config_files()
        except (cfg.Error, ValueError, OSError) as e:
            return Outcome(ok=False, error=str(e), files=files)
        finally:
            quiet.setLevel(level)
    return Outcome(ok=True, applied=applied, ignored=ignored, files=files)

