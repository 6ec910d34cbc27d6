"""Shared helpers for the one-module-per-group pattern."""


def make(group_name, opts, title=None, help_text=None):
    """Return (register_opts, list_opts) functions for one option group."""
    from oslo_config import cfg

    group = cfg.OptGroup(group_name, title=title, help=help_text) \
        if group_name else None

    def register_opts(conf):
        if group is not None:
            conf.register_group(group)
            conf.register_opts(opts, group=group)
        else:
            conf.register_opts(opts)

    def list_opts():
        return {group_name or "DEFAULT": opts}

    return register_opts, list_opts
