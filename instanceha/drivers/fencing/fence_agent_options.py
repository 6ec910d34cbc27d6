"""The fence_agent driver's fields, validated: :class:`FenceAgentOptions`.

Fields (besides ``address``, ``username``, ``password``):

``agent``
    the agent's name: ``fence_`` and letters, digits or ``_``, found as an
    executable in the search path (``/usr/sbin``, ``/usr/libexec/fence-
    agents``, ``/sbin``, ``/usr/local/sbin``, then ``$PATH``). Agents that
    power nothing off (``fence_kdump``, ``fence_compute``...) are refused.
``params``
    a mapping of agent parameter names to strings, numbers or booleans
    (true/false are sent as 1/0). ``action``, ``username``/``login`` and
    ``password``/``passwd`` are ours: use the fields.
``agent_timeout``
    seconds one agent run may take.

Every error is a FenceError naming the host (and the field, for a setting)
and never the password.

A host's validated fields are a :class:`Settings`; :func:`find_agent`
finds the agent's executable.
"""

import dataclasses
import os
import re

import structlog

from instanceha.drivers.fencing import base

LOG = structlog.get_logger("instanceha.fencing.fence_agent")

#: where Debian (/usr/sbin), RHEL (/usr/sbin) and Debian's helper binaries
#: (/usr/libexec/fence-agents) keep the agents; $PATH is searched after
DEFAULT_SEARCH_PATH = ("/usr/sbin", "/usr/libexec/fence-agents", "/sbin",
                       "/usr/local/sbin")
_AGENT_NAME = re.compile(r"^fence_[A-Za-z0-9_]+$")
#: agents that never power anything off: they cannot prove a host dead
NOT_POWER_AGENTS = {
    "fence_kdump": "it waits for a kdump message and powers nothing off "
                   "(instanceha's [kdump] does that job)",
    "fence_kdump_send": "it is the kdump sender, not a fence agent",
    "fence_ack_manual": "it is a manual acknowledgement",
    "fence_heuristics_ping": "it is a heuristic, not a fence",
    "fence_compute": "it evacuates through Nova, which is instanceha's own "
                     "job, and powers nothing off",
    "fence_evacuate": "it evacuates through Nova, which is instanceha's own "
                      "job, and powers nothing off",
}
_PARAM_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]*$")
#: parameters the driver sets itself (names with - read as _)
_RESERVED = {
    "action": "the driver chooses the action",
    "username": "use the username field",
    "login": "use the username field",
    "password": "use the password field (kept out of logs)",
    "passwd": "use the password field (kept out of logs)",
}
#: characters that end a line for the agent (Python reads its stdin with
#: universal newlines) or for anything splitting lines; NUL for good measure
_BREAKS = frozenset("\n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029\x00")


@dataclasses.dataclass(frozen=True)
class Settings:
    """A host's validated settings. Holds no secret."""
    agent: str
    path: str
    params: tuple          # ((name, value as sent), ...)
    agent_timeout: float


def find_agent(name, search_path, path_env=None):
    """The executable file ``name`` in ``search_path`` then $PATH, or None."""
    dirs = list(search_path)
    path_env = os.environ.get("PATH", "") if path_env is None else path_env
    dirs += [d for d in path_env.split(os.pathsep) if d]
    for d in dirs:
        candidate = os.path.join(d, name)
        if os.path.isfile(candidate) and os.access(candidate, os.X_OK):
            return candidate
    return None


def has_break(text):
    return any(c in _BREAKS for c in text)


class FenceAgentOptions:
    """Mixin: the settings of a driver that has ``name``, ``_timeout``
    (``[fencing] timeout``), ``_search_path`` and ``_path_env``."""

    def settings(self, bmc):
        """The host's validated settings; an invalid one is a FenceError
        naming the host and the field (never a secret's value)."""
        agent = bmc.options.get("agent")
        if not agent:
            raise self._field_error(bmc, "agent", "missing (the fence agent "
                                    "to run, e.g. fence_ipmilan)")
        if not isinstance(agent, str) or not _AGENT_NAME.match(agent):
            raise self._field_error(bmc, "agent", "%r is not a fence agent "
                                    "name (fence_ and letters, digits or _)"
                                    % (agent,))
        if agent in NOT_POWER_AGENTS:
            raise self._field_error(bmc, "agent", "%s cannot fence: %s"
                                    % (agent, NOT_POWER_AGENTS[agent]))
        for field in ("address", "username", "password"):
            if has_break(getattr(bmc, field) or ""):
                raise self._field_error(bmc, field, "holds a line break or "
                                        "NUL (it would add agent parameters)")
        if "://" in (bmc.address or ""):
            raise self._field_error(bmc, "address", "%s is a URL; agents take"
                                    " a host name or IP address (ip=)"
                                    % bmc.address)
        params = self._params(bmc)
        timeout = self._timeout
        if bmc.options.get("agent_timeout") is not None:
            raw = bmc.options["agent_timeout"]
            try:
                timeout = -1 if isinstance(raw, bool) else float(raw)
            except (TypeError, ValueError):
                timeout = -1
            if not 0 < timeout < float("inf"):
                raise self._field_error(bmc, "agent_timeout", "%r is not a "
                                        "positive number of seconds" % (raw,))
        path = find_agent(agent, self._search_path, self._path_env)
        if path is None:
            LOG.error("fence_error", host=bmc.host, driver=self.name,
                      agent=agent, reason="agent not installed")
            raise base.FenceError(
                "%s: fence agent %s is not installed (looked in %s and $PATH;"
                " Debian and RHEL ship it in the fence-agents packages)"
                % (bmc.host, agent, ", ".join(self._search_path)))
        return Settings(agent=agent, path=path, params=params,
                        agent_timeout=timeout)

    def _params(self, bmc):
        raw = bmc.options.get("params")
        if raw is None:
            raw = {}
        if not isinstance(raw, dict):
            raise self._field_error(bmc, "params", "must be a mapping of "
                                    "agent parameter names to values")
        seen = {}
        params = []
        for key, value in raw.items():
            if not isinstance(key, str) or not _PARAM_NAME.match(key):
                raise self._field_error(bmc, "params", "%r is not an agent "
                                        "parameter name" % (key,))
            canonical = key.replace("-", "_")
            if canonical in _RESERVED:
                raise self._field_error(bmc, "params.%s" % key,
                                        _RESERVED[canonical])
            if canonical in seen:
                raise self._field_error(bmc, "params.%s" % key, "given twice"
                                        " (as %s too)" % seen[canonical])
            seen[canonical] = key
            if isinstance(value, bool):
                text = "1" if value else "0"
            elif isinstance(value, (int, float, str)):
                text = str(value)
            else:
                raise self._field_error(bmc, "params.%s" % key, "must be a "
                                        "string, number or boolean, not %s"
                                        % type(value).__name__)
            if has_break(text):
                raise self._field_error(bmc, "params.%s" % key, "holds a line"
                                        " break or NUL (it would add agent "
                                        "parameters)")
            params.append((key, text))
        return tuple(params)

    def _field_error(self, bmc, field, reason):
        LOG.error("fence_error", host=bmc.host, driver=self.name,
                  field=field, reason=reason)
        return base.FenceError("%s: field %s: %s" % (bmc.host, field, reason))
