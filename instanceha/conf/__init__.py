"""oslo.config option groups, one module per group.

Components receive a ``conf`` object; nothing imports a global. Each group
module exposes ``GROUP`` (or None for DEFAULT), ``OPTS``, ``register_opts``
and ``list_opts``; :mod:`instanceha.conf.opts` gathers them for the sample
generator.
"""

import difflib
import glob
import os
import warnings

from oslo_config import cfg

from instanceha.conf import api
from instanceha.conf import audit
from instanceha.conf import capacity
from instanceha.conf import ceph_fencing
from instanceha.conf import control_plane
from instanceha.conf import coordination
from instanceha.conf import default
from instanceha.conf import detection
from instanceha.conf import drain
from instanceha.conf import evacuation
from instanceha.conf import explain
from instanceha.conf import failover_capacity
from instanceha.conf import fencing
from instanceha.conf import heartbeat
from instanceha.conf import instance_repair
from instanceha.conf import journal
from instanceha.conf import kdump
from instanceha.conf import maintenance
from instanceha.conf import notifications
from instanceha.conf import policy
from instanceha.conf import proactive
from instanceha.conf import recovery
from instanceha.conf import reserved_hosts

MODULES = [default, detection, fencing, evacuation, policy, journal,
           notifications, kdump, api, control_plane, audit, recovery,
           capacity, reserved_hosts, coordination, heartbeat, drain,
           maintenance, instance_repair, ceph_fencing,
           failover_capacity, proactive]


def new_conf():
    """A fresh ConfigOpts with every instanceha option registered."""
    conf = cfg.ConfigOpts()
    for module in MODULES:
        module.register_opts(conf)
    return conf


def load(argv=None, default_config_files=None):
    """Parse the command line and config files and check every value now,
    so a bad value stops the start with its group and option named instead
    of failing later in the middle of a recovery. An option or group that
    nothing reads (a typo such as ``treshold``) is an error too: silently
    running on the default is worse than not starting."""
    conf = new_conf()
    explain.parse(conf, args=argv or [], project="instanceha",
                  default_config_files=default_config_files)
    check_unknown_options(conf)
    for module in MODULES:
        for group, opts in module.list_opts().items():
            explain.check_values(conf, group, opts)
    for module in MODULES:
        validate = getattr(module, "validate", None)
        if validate is not None:
            validate(conf)
    return conf


def _group_key(group):
    # oslo.config matches section names case-insensitively, except DEFAULT.
    return group if group == "DEFAULT" else group.lower()


def known_options(conf=None):
    """{group: set of option names} that a config file may set: every
    instanceha option, oslo.messaging's (transport_url, [oslo_messaging_*])
    and oslo.config's own, each with its deprecated names."""
    with warnings.catch_warnings():
        # oslo.messaging imports eventlet, which warns on stderr that it is
        # deprecated: noise in front of every CLI command's answer.
        warnings.filterwarnings("ignore", message=r"\s*Eventlet is deprecated")
        import oslo_messaging.opts
    pairs = []
    for module in MODULES:
        pairs.extend(module.list_opts().items())
    pairs.extend((group or "DEFAULT", opts)
                 for group, opts in oslo_messaging.opts.list_opts())
    known = {}
    for group, opts in pairs:
        for opt in opts:
            _add_opt(known, group, opt)
    if conf is not None:
        # Registered by oslo.config itself (config_source, ...): the names
        # in ``conf`` that are neither a group nor already known.
        groups = {_group_key(g) for g, _ in pairs}
        known["DEFAULT"].update(name for name in conf
                                if _group_key(name) not in groups)
    return known


def _add_opt(known, group, opt):
    names = known.setdefault(_group_key(group), set())
    names.update({opt.name, opt.dest})
    for old in opt.deprecated_opts:
        if old.name or old.group:
            name = old.name or opt.dest
            target = known.setdefault(_group_key(old.group or group), set())
            target.update({name, name.replace("-", "_")})


#: The files oslo.config read (defined beside the errors that name them).
config_files = explain.config_files


def check_unknown_options(conf):
    """Raise cfg.Error for the first section or key of a config file that
    is no known option group or option, naming the file and suggesting the
    closest known name."""
    known = known_options(conf)
    ours = {}
    for module in MODULES:
        for group, opts in module.list_opts().items():
            ours.setdefault(_group_key(group), {}).update(
                (opt.name, opt) for opt in opts)
    # Sections that oslo.config's config_source names hold driver settings.
    sources = {_group_key(s) for s in (conf.config_source or [])}
    for path in config_files(conf):
        sections = {}
        try:
            cfg.ConfigParser(path, sections).parse()
        except OSError as e:
            raise cfg.Error(explain.unreadable(path, e))
        except cfg.ParseError as e:
            raise cfg.Error("%s: %s" % (path, e))
        for section, values in sections.items():
            key = _group_key(section)
            if key in sources:
                continue
            if key not in known:
                raise cfg.Error("%s: unknown group [%s]%s" % (
                    path, section, _suggest(section, known, "group")))
            for name in values:
                if name not in known[key]:
                    raise cfg.Error("%s: [%s] unknown option %r%s" % (
                        path, section, name,
                        _suggest(name, known[key], "option")))
                opt = ours.get(key, {}).get(name)
                why = opt is not None and explain.inline_comment(
                    path, section, opt, values[name][-1])
                if why:
                    raise cfg.Error(why)


def _suggest(name, candidates, what):
    by_lower = {c.lower(): c for c in candidates}
    close = difflib.get_close_matches(name.lower(), list(by_lower), n=1,
                                      cutoff=0.6)
    if not close:
        # A shortened name ("grace" for "grace_period").
        close = sorted(c for c in by_lower
                       if len(name) >= 3 and c.startswith(name.lower()))[:1]
    if not close:
        return " (no such %s)" % what
    return "; did you mean %r?" % by_lower[close[0]]


def make(overrides=None):
    """A parsed conf that reads no config file, with ``overrides``
    ({group: {option: value}}, "DEFAULT" for the default group) set: for
    tests, benchmarks and tools that build instanceha in-process."""
    conf = new_conf()
    conf([], project="instanceha", default_config_files=[])
    for group, values in (overrides or {}).items():
        for key, value in values.items():
            conf.set_override(key, value,
                              None if group == "DEFAULT" else group)
    return conf
