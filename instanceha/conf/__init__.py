"""oslo.config option groups, one module per group.

Components receive a ``conf`` object; nothing imports a global. Each group
module exposes ``GROUP`` (or None for DEFAULT), ``OPTS``, ``register_opts``
and ``list_opts``; :mod:`instanceha.conf.opts` gathers them for the sample
generator.
"""

from oslo_config import cfg

from instanceha.conf import api
from instanceha.conf import default
from instanceha.conf import detection
from instanceha.conf import evacuation
from instanceha.conf import fencing
from instanceha.conf import journal
from instanceha.conf import kdump
from instanceha.conf import notifications
from instanceha.conf import policy

MODULES = [default, detection, fencing, evacuation, policy, journal,
           notifications, kdump, api]


def new_conf():
    """A fresh ConfigOpts with every instanceha option registered."""
    conf = cfg.ConfigOpts()
    for module in MODULES:
        module.register_opts(conf)
    return conf


def load(argv=None, default_config_files=None):
    """Parse the command line and config files and check every value now,
    so a bad value stops the start with its group and option named instead
    of failing later in the middle of a recovery."""
    conf = new_conf()
    conf(args=argv or [], project="instanceha",
         default_config_files=default_config_files)
    for module in MODULES:
        for group, opts in module.list_opts().items():
            section = conf if group == "DEFAULT" else conf[group]
            for opt in opts:
                try:
                    getattr(section, opt.dest)
                except (cfg.ConfigFileValueError, ValueError) as e:
                    raise cfg.Error("[%s] %s: %s" % (group, opt.name, e))
    return conf


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
