"""The start-up checks of ``instanceha run``: one list that ``run`` makes
before it builds or binds anything, and that ``instanceha check`` makes
too (then its live reads), so that the two never disagree on whether the
service would start.

Each check reads, and writes nothing: files are opened for reading, the
listeners' addresses (the operator API's TCP port, the kdump and agent
heartbeat UDP ports) are bound and closed at once (nothing listens), a
notification transport is built and cleaned up without connecting.
Each error is one line naming the option or file and what to do; the
inventory gives every error it has.
"""

import dataclasses
import logging
import os
import socket
from typing import Any, Callable, List, Optional, Sequence, Tuple, cast

from instanceha.api import listeners
from instanceha.conf import api as api_conf
from instanceha.drivers import fencing as fencing_pkg
from instanceha.drivers.compute.clouds import clouds_file_problem
from instanceha.drivers.fencing import inventory as inventory_mod
from instanceha.errors import ConfigError, StartupError
from instanceha.heartbeat.keys import KeyFileError
from instanceha.log import mask_url
from instanceha.service.inventory import Inventory, check_inventory
from instanceha.service.startup import (
    cannot_bind, check_shared_journal, error_text)
from instanceha.sources import heartbeat as heartbeat_src
from instanceha.sources import udp


@dataclasses.dataclass
class Outcome:
    """One check's result: ``errors`` (one line each; empty when it
    passed), ``ok`` (what passed, for ``check``'s report, or None) and
    ``value`` (what it read: the inventory)."""
    what: str
    errors: List[str]
    ok: Optional[str] = None
    value: Any = None


#: a check of ``conf``: what passed (None: nothing to say), or raises
Check = Callable[[Any], object]


def journal(conf: Any) -> None:
    """Replicas share one database; the URL's dialect and driver load; a
    SQLite file can be created where it is to be."""
    check_shared_journal(conf)
    url = conf.journal.connection
    # Imported here: SQLAlchemy costs ~0.1 s at import.
    import sqlalchemy as sa
    try:
        parsed = sa.engine.make_url(url)
        sa.create_engine(url).dispose()     # loads the driver, connects not
    except Exception as e:   # noqa: BLE001 - a URL, a dialect, a driver
        raise ConfigError("journal: cannot open [journal] connection %s: "
                          "%s" % (mask_url(url), error_text(e)))
    if parsed.get_backend_name() == "sqlite" and parsed.database \
            and not parsed.database.startswith(":") \
            and "mode=memory" not in url:
        why = _sqlite_problem(os.path.abspath(parsed.database))
        if why is not None:
            raise ConfigError("journal: [journal] connection %s: %s"
                              % (mask_url(url), why))
    return None


def _sqlite_problem(path: str) -> Optional[str]:
    if os.path.isdir(path):
        return "%s is a directory: give a file's path" % path
    if os.path.exists(path):
        if not os.access(path, os.R_OK | os.W_OK):
            return ("%s: permission denied: make it readable and writable "
                    "by the service's user (uid %d)" % (path, os.geteuid()))
        return None
    parent = os.path.dirname(path)
    while not os.path.exists(parent):
        parent = os.path.dirname(parent)
    if not os.path.isdir(parent):
        return ("%s cannot be created: %s is not a directory; give a path "
                "in a directory" % (path, parent))
    if not os.access(parent, os.W_OK | os.X_OK):
        return ("%s cannot be created: permission denied in %s for uid %d; "
                "make the directory writable by the service's user"
                % (path, parent, os.geteuid()))
    return None


def inventory(conf: Any) -> Tuple[Inventory, List[str]]:
    """The BMC inventory parsed, every error at once; (inventory,
    warnings) as its value."""
    inv, warnings = inventory_mod.read(conf.fencing.inventory,
                                       fencing_pkg.FIELDS)
    check_inventory(conf, inv)
    return inv, warnings


def operator_api(conf: Any) -> Optional[str]:
    """The unix socket's directory and holder, the TCP address free."""
    api = conf.api
    if not api.enabled:
        return None
    why = api_conf.check_listener(conf)
    if why is None and api.unix_socket:
        why = api_conf.check_unix_socket(api.unix_socket) \
            or listeners.served_by_another(api.unix_socket)
    if why is not None:
        raise StartupError("operator API: %s" % why)
    where = []
    if api.listen_tcp:
        where.append(_probe_tcp(api.listen_address, api.port))
    if api.unix_socket:
        where.append(api.unix_socket)
    return "can listen on %s" % (" and ".join(where) or "nothing")


def _probe_tcp(host: str, port: int) -> str:
    """Bind (host, port) and close it again, as the API's server binds
    it (SO_REUSEADDR); raises StartupError like the start's step."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
        family, kind, proto, _, addr = infos[0]
        probe = socket.socket(family, kind, proto)
        try:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            probe.bind(addr)
        finally:
            probe.close()
    except OSError as e:
        raise cannot_bind("operator API", (host, port), e)
    return ("[%s]:%s" if ":" in str(host) else "%s:%s") % (host, port)


def kdump(conf: Any) -> None:
    """The kdump listener's UDP address is free (bound and closed)."""
    group = conf.kdump
    if not group.enabled:
        return None
    try:
        udp.bind(group.listen_address, group.port).close()
    except OSError as e:
        raise cannot_bind("kdump listener",
                          (group.listen_address, group.port), e)
    return None


def notifications(conf: Any) -> None:
    """The notification transport builds (URL syntax, driver); the broker
    is not connected to here."""
    group = conf.notifications
    if not group.enabled:
        return None
    # Imported here: oslo.messaging is loaded only when notifications are
    # enabled.
    import oslo_messaging
    from instanceha.sources.notifications import event_filter
    # stevedore logs a driver it cannot load on top of the error said.
    quiet = logging.getLogger("stevedore")
    level = quiet.level
    quiet.setLevel(logging.CRITICAL)
    try:
        event_filter(group.event_types)
        oslo_messaging.get_notification_transport(
            conf, url=group.transport_url).cleanup()
    except Exception as e:   # noqa: BLE001 - one line, exit status 2
        raise StartupError("notifications: %s: %s" % (
            type(e).__name__, mask_url(" ".join(str(e).split()))))
    finally:
        quiet.setLevel(level)
    return None


def agent_heartbeat(conf: Any) -> Optional[str]:
    """The heartbeat listener's addresses parse and its key files load."""
    group = conf.agent
    if not group.listen_addresses:
        return None
    addresses = heartbeat_src.bind_addresses(group)
    heartbeat_src.load_keyring(group)
    for address, port in addresses:
        try:
            udp.bind(address, port).close()
        except OSError as e:
            raise heartbeat_src.cannot_bind(address, port, e)
    return "keys loaded; listens on %s" % ", ".join(
        "%s:%s" % a for a in addresses)


def nova(conf: Any) -> None:
    """clouds.yaml ([DEFAULT] clouds_file) names [DEFAULT] cloud."""
    problem = clouds_file_problem(conf)
    if problem is not None:
        raise ConfigError(problem)
    return None


#: (what, check): in the order ``run`` makes them
CHECKS: List[Tuple[str, Check]] = [
    ("journal", journal), ("inventory", inventory),
    ("operator API", operator_api), ("notifications", notifications),
    ("kdump", kdump), ("agent heartbeat", agent_heartbeat), ("nova", nova)]


def run(conf: Any, checks: Optional[Sequence[Tuple[str, Check]]] = None
        ) -> List[Outcome]:
    """Every check of :data:`CHECKS`: [Outcome], in order."""
    outcomes: List[Outcome] = []
    for what, check in checks or CHECKS:
        try:
            result = check(conf)
        except inventory_mod.InventoryError as e:
            outcomes.append(Outcome(what, list(e.errors)))
        except (ConfigError, StartupError, KeyFileError) as e:
            outcomes.append(Outcome(what, [" ".join(str(e).split())]))
        else:
            if what == "inventory":
                outcomes.append(Outcome(what, [], value=result))
            else:
                # (every check but the inventory's says what passed)
                outcomes.append(Outcome(what, [], ok=cast(Optional[str],
                                                          result)))
    return outcomes


def refusals(outcomes: Sequence[Outcome]) -> List[str]:
    """Every error line of ``outcomes``."""
    return [line for o in outcomes for line in o.errors]
