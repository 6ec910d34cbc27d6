"""Shared helpers for the one-module-per-group pattern."""

from oslo_config import cfg


def make(group_name, opts, title=None, help_text=None):
    """Return (register_opts, list_opts) functions for one option group."""

    def register_opts(conf):
        if group_name:
            # A new OptGroup per ConfigOpts: oslo.config keeps overrides in
            # the group object, so sharing one would leak them between confs.
            conf.register_group(cfg.OptGroup(group_name, title=title,
                                             help=help_text))
            conf.register_opts(opts, group=group_name)
        else:
            conf.register_opts(opts)

    def list_opts():
        return {group_name or "DEFAULT": opts}

    return register_opts, list_opts
