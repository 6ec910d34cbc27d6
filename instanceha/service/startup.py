"""What the start waits for: the backends (Nova, the journal, the
coordination backend) that may not answer yet, which errors waiting can
cure, and the stand-ins the service is built with until they answer."""

import threading
import time
from typing import Any, Callable, Dict, List, Optional, Sequence, cast

from instanceha.errors import ConfigError, StartupError
from instanceha.log import mask_url
from instanceha.drivers.compute.base import CallRecord
from instanceha.drivers.compute.nova_clock import NovaClock


class StartInterrupted(Exception):
    """SIGTERM (or SIGINT) while the start waited for a backend; nothing
    was acted on."""


#: Seconds added to the time systemd allows the start, each time it waits
#: again for a backend, beyond the next attempt's back-off (the attempt's
#: own connect timeout and some slack).
EXTEND_SLACK = 60.0


def journal_is_local(url: str) -> bool:
    """A SQLite journal: a file on this node."""
    return url.strip().lower().startswith("sqlite")


def cannot_bind(what: str, bind: Sequence[Any], e: OSError) -> StartupError:
    """The StartupError of a start step (``what``) whose (host, port)
    ``bind`` cannot be bound (``e``, an OSError)."""
    where = ("[%s]:%s" if ":" in str(bind[0]) else "%s:%s") % tuple(bind)
    return StartupError("%s: cannot bind %s: %s" % (what, where, e))


def check_shared_journal(conf: Any) -> None:
    """Refuse replicas that would each keep their own history."""
    if conf.coordination.backend_url \
            and journal_is_local(conf.journal.connection):
        raise ConfigError(
            "[coordination] backend_url is set but [journal] connection is "
            "SQLite, a file on this node: each replica would keep its own "
            "history and a member elected on another node could not resume "
            "from it; set [journal] connection to one MySQL/MariaDB or "
            "PostgreSQL database shared by every replica, or unset "
            "[coordination] backend_url")


#: MySQL/MariaDB answers a retry cannot change: access denied (1044, 1045,
#: 1698), unknown database (1049).
_MYSQL_REFUSED = frozenset({1044, 1045, 1049, 1698})
#: PostgreSQL's equivalents, in the text of a failed connection.
_PG_REFUSED = ("password authentication failed", "no pg_hba.conf entry",
               "does not exist", "authentication failed")


def journal_unreachable(e: BaseException) -> bool:
    """True when opening the journal failed because its database does not
    answer (yet): refused, timed out, starting up, too many connections.
    False for what waiting cannot cure: a bad URL or driver, a wrong
    password or database name, a SQLite file that cannot be opened."""
    # Imported here: SQLAlchemy costs ~0.2 s, and only a start whose
    # journal did not open needs it.
    import sqlalchemy.exc as sa_exc
    if not isinstance(e, (sa_exc.OperationalError, sa_exc.InterfaceError)):
        return False
    orig = getattr(e, "orig", None)
    if type(orig).__module__.startswith("sqlite3"):
        return False
    args = getattr(orig, "args", ())
    if args and isinstance(args[0], int):
        return args[0] not in _MYSQL_REFUSED
    text = str(orig)
    return not any(t in text for t in _PG_REFUSED)


#: keystoneauth / openstacksdk errors that say Keystone or Nova did not
#: answer (yet), by class name anywhere in the cause chain.
_NOVA_NO_ANSWER = frozenset({
    "ConnectFailure", "ConnectTimeout", "ConnectionError",
    "RetriableConnectionFailure", "UnknownConnectionError",
    "DiscoveryFailure", "ServiceUnavailable", "GatewayTimeout",
    "BadGateway", "InternalServerError", "HttpServerError"})


def nova_unreachable(e: BaseException) -> bool:
    """True when connecting to Nova at start failed because Keystone or
    Nova did not answer (yet): refused, timed out, a 5xx, no version
    document. False for what waiting cannot cure: an unknown cloud in
    clouds.yaml, rejected credentials (401/403), a Nova too old."""
    chain: List[BaseException] = []
    x: Optional[BaseException] = e
    while x is not None and len(chain) < 8 and x not in chain:
        chain.append(x)
        x = x.__cause__ or x.__context__
    for x in chain:
        status = getattr(x, "http_status", None) \
            or getattr(x, "status_code", None)
        if isinstance(status, int) and 400 <= status < 500:
            return False
    for x in chain:
        status = getattr(x, "http_status", None) \
            or getattr(x, "status_code", None)
        if isinstance(status, int) and status >= 500:
            return True
        if type(x).__name__ in _NOVA_NO_ANSWER \
                or isinstance(x, (OSError, TimeoutError)):
            return True
    return False


def error_text(e: BaseException) -> str:
    """One line for an error, a URL's password masked; SQLAlchemy's
    wrapper (its SQL and link) left out."""
    orig = getattr(e, "orig", None)
    if orig is not None:
        e = orig
    text = " ".join(str(e).split())
    if type(e).__name__ == "CoordinationError":
        return mask_url(text)     # already "<its cause>: <text>"
    return mask_url("%s: %s" % (type(e).__name__, text))


def iso(t: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t))


class Awaited:
    """Stands for a backend the start waits for (one that did not answer
    when the service was built): forwards to it once :meth:`bind` gave
    it; before that, any use raises."""

    def __init__(self, what: str) -> None:
        self._what = what
        # What it stands for (a compute driver, the journal), reached
        # through __getattr__ by name: any object.
        self._target: Any = None

    def bind(self, target: Any) -> None:
        self._target = target

    @property
    def bound(self) -> bool:
        return self._target is not None

    def __getattr__(self, name: str) -> Any:
        target = self.__dict__.get("_target")
        if target is None:
            raise RuntimeError("%s not reached yet"
                               % self.__dict__.get("_what"))
        return getattr(target, name)


class AwaitedNova(Awaited):
    """Nova's stand-in. The sources take the driver's Nova clock and call
    record when they are built: the stand-in has them from the start and
    hands them to the driver it is bound to, so all share one of each."""

    def __init__(self) -> None:
        super().__init__("Nova")
        self.nova_clock = NovaClock()
        self.api_record = CallRecord()

    def bind(self, target: Any) -> None:
        # ComputeDriver keeps them per object, made on first use.
        target.__dict__["_nova_clock"] = self.nova_clock
        target.__dict__["_call_record"] = self.api_record
        # A coordinated member's gate on each write request (set on the
        # stand-in when the service was built).
        if self.__dict__.get("write_gate") is not None:
            target.write_gate = self.__dict__["write_gate"]
        super().bind(target)


class Awaiting:
    """What the start waits for, since when and why: shown by the status
    file, GET /status, /healthz and systemd's STATUS=."""

    def __init__(self, clock: Callable[[], float]) -> None:
        self.clock = clock
        self._mu = threading.Lock()
        self._what: Optional[str] = None
        self._error: Optional[str] = None
        self._since: Optional[float] = None
        self._retry_in: Optional[float] = None
        self._attempts = 0

    def failed(self, what: str, error: str, retry_in: float) -> bool:
        with self._mu:
            changed = what != self._what or error != self._error
            if what != self._what:
                self._what, self._since, self._attempts = \
                    what, self.clock(), 0
            self._attempts += 1
            self._error, self._retry_in = error, retry_in
        return changed

    def reached(self, what: str) -> Optional[float]:
        """The awaited backend answered: seconds waited (None when it was
        not awaited)."""
        with self._mu:
            if self._what != what:
                return None
            # (_since is set with _what)
            waited = self.clock() - cast(float, self._since)
            self._what = self._error = self._since = None
            return waited

    def text(self) -> Optional[str]:
        with self._mu:
            if self._what is None:
                return None
            return "starting: waiting for %s (%s) since %s" % (
                self._what, self._error, iso(cast(float, self._since)))

    def view(self) -> Optional[Dict[str, Any]]:
        text = self.text()
        with self._mu:
            if self._what is None:
                return None
            return {"waiting_for": self._what, "error": self._error,
                    "since": self._since, "attempts": self._attempts,
                    "retry_in": self._retry_in, "text": text}
