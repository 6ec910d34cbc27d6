"""Entry point for oslo-config-generator (namespace 'instanceha')."""

from instanceha import conf as conf_pkg


def list_opts():
    result = []
    for module in conf_pkg.MODULES:
        for group, opts in module.list_opts().items():
            result.append((group, opts))
    return result
