"""The journal: every transition, action and evacuation, durable.

Written through SQLAlchemy Core so SQLite (one replica), MySQL/MariaDB or
PostgreSQL work from the URL alone. The engine writes a transition *before*
it starts the side effect the transition calls for; on start it reads the
last state of every host back (:meth:`Journal.latest`) and resumes.
"""

import contextlib
import os
import threading

import sqlalchemy as sa
import structlog

from instanceha.journal import migrate

LOG = structlog.get_logger("instanceha.journal")

#: Every time in the journal: epoch seconds in double precision (DOUBLE
#: on MariaDB/MySQL, double precision on PostgreSQL, REAL on SQLite), so
#: it reads back exactly as written. A bare sa.Float is single precision
#: on MariaDB (an epoch time in 10,000 s steps): never use it here.
TIME = sa.Double

from instanceha.util.writes import write

METADATA = sa.MetaData()

TRANSITIONS = sa.Table(
    "transitions", METADATA,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("host_id", sa.String(64), nullable=False, index=True),
    sa.Column("host_name", sa.String(255), nullable=False),
    sa.Column("at", TIME, nullable=False),
    sa.Column("src", sa.String(32), nullable=False),
    sa.Column("dst", sa.String(32), nullable=False),
    sa.Column("event", sa.String(64), nullable=False),
    sa.Column("source", sa.String(32), nullable=False),
    sa.Column("reason", sa.Text, nullable=False),
    sa.Column("record", sa.JSON, nullable=False),
)

ACTIONS = sa.Table(
    "actions", METADATA,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("host_id", sa.String(64), nullable=False, index=True),
    sa.Column("host_name", sa.String(255), nullable=False),
    sa.Column("kind", sa.String(32), nullable=False),
    sa.Column("started_at", TIME, nullable=False),
    sa.Column("finished_at", TIME),
    sa.Column("outcome", sa.String(64)),      # result event kind or "error"
    sa.Column("detail", sa.Text),
)

EVACUATIONS = sa.Table(
    "evacuations", METADATA,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("host_id", sa.String(64), nullable=False, index=True),
    sa.Column("host_name", sa.String(255), nullable=False),
    sa.Column("server_id", sa.String(64), nullable=False, index=True),
    sa.Column("requested_at", TIME, nullable=False),
    sa.Column("finished_at", TIME),
    sa.Column("status", sa.String(32), nullable=False),  # requested|done|...
    sa.Column("dest_host", sa.String(255)),
    sa.Column("detail", sa.Text),
)

#: Rebuilds that may still wait in a dead destination's message queue: the
#: server was sent again elsewhere, and the host it was first cast to runs
#: the old rebuild when its compute starts again. Checked (and repaired)
#: when that host comes back; see engine/actions.py check_cleanup.
STALE_REBUILDS = sa.Table(
    "stale_rebuilds", METADATA,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("server_id", sa.String(64), nullable=False),
    sa.Column("source_id", sa.String(64), nullable=False),   # host record id
    sa.Column("source_host", sa.String(255), nullable=False),
    sa.Column("suspect_host", sa.String(255), nullable=False, index=True),
    sa.Column("recorded_at", TIME, nullable=False),
    sa.Column("resolved_at", TIME),
    sa.Column("resolution", sa.Text),
)

#: Reserved hosts brought in for a lost host: written before the reserved
#: host's compute service is enabled, so a restart neither forgets one in
#: use (it is enabled again if the enable did not happen) nor gives it to
#: a second lost host. ``returned_at`` is set when it goes back to the
#: reserve (or stays in service for good: ``outcome`` says which).
RESERVED = sa.Table(
    "reserved_hosts", METADATA,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("reserved_host", sa.String(255), nullable=False, index=True),
    sa.Column("host_id", sa.String(64), nullable=False),     # the lost host
    sa.Column("host_name", sa.String(255), nullable=False),
    sa.Column("original_reason", sa.Text),
    sa.Column("taken_at", TIME, nullable=False),
    sa.Column("returned_at", TIME),
    sa.Column("outcome", sa.Text),
)

#: What each fencing method of each host has been seen to report
#: (instanceha.policy.proof.Evidence): a BMC seen On for the host, an Off
#: read while the host was up. Kept so that a restart or a takeover does
#: not forget which BMCs may prove a death (one row per host and method).
BMC_EVIDENCE = sa.Table(
    "bmc_evidence", METADATA,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("host_name", sa.String(255), nullable=False, index=True),
    sa.Column("method", sa.String(512), nullable=False),
    sa.Column("at", TIME, nullable=False),
    sa.Column("evidence", sa.JSON, nullable=False),
)


#: Instance repair (issue 25): one row per repair action sent for a server
#: (``action`` start, hard_reboot, cold_migrate, rebuild; ``outcome``
#: running, then success, failure, timeout or interrupted), and one row
#: per verdict that closed a server's case without an action (``action``
#: ``failed``: marked failed until cleared; ``cleared``: an operator
#: cleared it; ``not_permitted``: its level forbids the next action;
#: ``excluded``: a service-owned server). Written before the action is
#: sent; the ladder's history is the rows since the last ``cleared``.
REPAIRS = sa.Table(
    "instance_repairs", METADATA,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("server_id", sa.String(64), nullable=False, index=True),
    sa.Column("host_name", sa.String(255)),
    sa.Column("action", sa.String(32), nullable=False),
    sa.Column("step", sa.Integer),
    sa.Column("verdict", sa.String(32)),
    sa.Column("started_at", TIME, nullable=False),
    sa.Column("finished_at", TIME),
    sa.Column("outcome", sa.String(32)),
    sa.Column("detail", sa.Text),
)

#: What a drain knows (engine/drain.py's Carry), so that a restarted
#: engine continues it instead of counting afresh: one row per drain of a
#: host, named by when the host entered draining (``since``), written at
#: each pass and before each migration request; ``state`` holds the
#: servers at the start, attempts, servers given up (and why),
#: destinations tried, stuck counts, cold moves to confirm and when each
#: move was asked; ``next_pass_at`` when its next pass is due.
#: ``ended_at`` is set when the drain ends.
DRAIN_RUNS = sa.Table(
    "drain_runs", METADATA,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("host_id", sa.String(64), nullable=False, index=True),
    sa.Column("host_name", sa.String(255), nullable=False),
    sa.Column("since", TIME, nullable=False),
    sa.Column("started_at", TIME, nullable=False),
    sa.Column("updated_at", TIME, nullable=False),
    sa.Column("next_pass_at", TIME),
    sa.Column("failed_at", TIME),
    sa.Column("ended_at", TIME),
    sa.Column("state", sa.JSON, nullable=False),
)

#: kind -> (table, its time column, rank among entries at the same time)
_HISTORY = {
    "transition": (TRANSITIONS, TRANSITIONS.c.at, 0),
    "action": (ACTIONS, ACTIONS.c.started_at, 1),
    "evacuation": (EVACUATIONS, EVACUATIONS.c.requested_at, 2),
}
HISTORY_KINDS = tuple(_HISTORY)


#: How many times a write transaction ended as a deadlock victim (or by a
#: lock wait timeout) is tried in all.
DEADLOCK_TRIES = 3
#: MySQL/MariaDB: deadlock found, lock wait timeout exceeded.
_DEADLOCK_CODES = (1213, 1205)


def _deadlock(error):
    """Did the database end this transaction to break a deadlock (it may
    simply be tried again)?"""
    args = getattr(getattr(error, "orig", None), "args", None) or ()
    return bool(args) and args[0] in _DEADLOCK_CODES


# Statements built once: executing them with a parameter dict reuses
# SQLAlchemy's compiled form instead of building and caching a new one.

_INSERT_TRANSITION = TRANSITIONS.insert()
_INSERT_ACTION = ACTIONS.insert()
_FINISH_ACTION = ACTIONS.update().where(
    ACTIONS.c.id == sa.bindparam("action_id"))

_INSERT_EVACUATION = EVACUATIONS.insert()
_FINISH_EVACUATION = EVACUATIONS.update().where(
    EVACUATIONS.c.id == sa.bindparam("evac_id"))


def _sqlite_pragmas(dbapi_connection, _record):
    """WAL with synchronous=NORMAL: a commit costs ~0.2 ms instead of
    ~1.4 ms (no fsync per commit), and readers (``instanceha status``, a
    restarted engine) never block the writer. A process crash loses
    nothing; an OS crash may lose the last commits, which the engine
    re-derives from Nova's state at start."""
    cur = dbapi_connection.cursor()
    cur.execute("PRAGMA journal_mode=WAL")
    cur.execute("PRAGMA synchronous=NORMAL")
    cur.execute("PRAGMA busy_timeout=10000")
    cur.close()


class Journal:

    def __init__(self, url, read_only=False):
        """``read_only``: for the CLI's read commands; nothing is created,
        upgraded or written (see :mod:`instanceha.journal.read_only`,
        whose NoJournal and OutOfDate it raises)."""
        if read_only:
            from instanceha.journal import read_only as ro
            self.engine = ro.engine(url)
            self._write_lock = None
            try:
                revision = ro.check(self.engine, url)
            except Exception:
                self.engine.dispose()
                raise
            self.schema = (revision, revision)
            return
        if url.startswith("sqlite:///") and not url.startswith("sqlite:///:"):
            path = url[len("sqlite:///"):]
            directory = os.path.dirname(path)
            if directory:
                os.makedirs(directory, exist_ok=True)
        sqlite = url.startswith("sqlite")
        # A server connection can drop between writes; a file cannot.
        self.engine = sa.create_engine(url, pool_pre_ping=not sqlite)
        # SQLite has one writer at a time; its busy handler makes waiting
        # writers sleep, so the engine's workers take turns here instead.
        self._write_lock = threading.Lock() \
            if self.engine.dialect.name == "sqlite" else None
        if self.engine.dialect.name == "sqlite":
            sa.event.listen(self.engine, "connect", _sqlite_pragmas)
        #: (revision found, revision now): the schema is brought to this
        #: release's on every open (instanceha run's start too).
        self.schema = migrate.upgrade(self.engine)

    def _write(self, work):
        """``work(connection)`` in one write transaction; returns what it
        returns. Every write of the journal goes through here: a
        transaction MariaDB/MySQL ends to break a deadlock (1213) or by a
        lock wait timeout (1205), as replicas or the engine's workers
        writing rows at once can make it, is rolled back and run again,
        DEADLOCK_TRIES times in all, instead of lost (a lost 'seen On' or
        transition is a decision a takeover would not know). Any other
        error, or a deadlock that lasts, is raised."""
        for attempt in range(1, DEADLOCK_TRIES + 1):
            try:
                with self._transaction() as c:
                    return work(c)
            except sa.exc.DBAPIError as e:
                if attempt == DEADLOCK_TRIES or not _deadlock(e):
                    raise
                LOG.warning("journal_write_retried", attempt=attempt,
                            tries=DEADLOCK_TRIES, reason=str(e.orig),
                            effect="the transaction was rolled back by the "
                                   "database and is run again")

    @contextlib.contextmanager
    def _transaction(self):
        if self._write_lock is None:
            with self.engine.begin() as c:
                yield c
        else:
            with self._write_lock, self.engine.begin() as c:
                yield c

    # -- writes ---------------------------------------------------------------
    @write
    def record(self, old, new, event, transition=True, start=(),
               finish=None):
        """One transaction: the action that produced ``event`` finished
        (``finish`` = (action_id, at, outcome, detail)), the transition
        ``old`` -> ``new`` (if ``transition``), and the actions it starts
        (``start``, a list of Action). Returns the new actions' ids."""
        def work(c):
            if finish is not None:
                self._finish(c, *finish)
            if transition:
                c.execute(_INSERT_TRANSITION, dict(
                    host_id=new.id, host_name=new.name or "", at=event.at,
                    src=old.state.value, dst=new.state.value,
                    event=event.kind.value, source=event.source or "",
                    reason=new.reason, record=new.to_dict()))
            return [c.execute(_INSERT_ACTION, dict(
                host_id=new.id, host_name=new.name or "", kind=a.value,
                started_at=event.at)).inserted_primary_key[0] for a in start]
        return self._write(work)

    @write
    def record_transition(self, old, new, event):
        self.record(old, new, event)

    @write
    def action_started(self, record, kind, at):
        def work(c):
            # (an Action, or the name of a step of one: "condemn")
            res = c.execute(_INSERT_ACTION, dict(
                host_id=record.id, host_name=record.name or "",
                kind=getattr(kind, "value", kind), started_at=at))
            return res.inserted_primary_key[0]
        return self._write(work)

    @write
    def close_open_actions(self, at, detail):
        """Give every action row without an outcome the outcome
        ``interrupted``; returns how many."""
        def work(c):
            return c.execute(ACTIONS.update().where(
                ACTIONS.c.finished_at.is_(None)).values(
                    finished_at=at, outcome="interrupted",
                    detail=detail)).rowcount
        return self._write(work)

    @write
    def action_finished(self, action_id, at, outcome, detail=""):
        def work(c):
            self._finish(c, action_id, at, outcome, detail)
        return self._write(work)

    @staticmethod
    def _finish(c, action_id, at, outcome, detail):
        c.execute(_FINISH_ACTION, dict(action_id=action_id, finished_at=at,
                                       outcome=outcome, detail=detail))

    @write
    def evacuation_requested(self, host_id, host_name, server_id, at):
        def work(c):
            res = c.execute(_INSERT_EVACUATION, dict(
                host_id=host_id, host_name=host_name, server_id=server_id,
                requested_at=at, status="requested"))
            return res.inserted_primary_key[0]
        return self._write(work)

    @write
    def evacuation_finished(self, evac_id, at, status, dest_host=None,
                            detail=""):
        def work(c):
            c.execute(_FINISH_EVACUATION, dict(
                evac_id=evac_id, finished_at=at, status=status,
                dest_host=dest_host, detail=detail))
        return self._write(work)

    @write
    def stale_rebuild_suspected(self, server_id, source_id, source_host,
                                suspect_hosts, at):
        """``server_id`` is being sent again; its earlier rebuild may still
        wait in the queue of each of ``suspect_hosts``."""
        def work(c):
            for host in suspect_hosts:
                c.execute(STALE_REBUILDS.insert(), dict(
                    server_id=server_id, source_id=source_id,
                    source_host=source_host, suspect_host=host,
                    recorded_at=at))
        return self._write(work)

    @write
    def stale_rebuild_resolved(self, row_id, at, resolution):
        def work(c):
            c.execute(STALE_REBUILDS.update().where(
                STALE_REBUILDS.c.id == row_id).values(
                    resolved_at=at, resolution=resolution))
        return self._write(work)

    def stale_rebuilds(self, suspect_host=None, unresolved=True):
        q = sa.select(STALE_REBUILDS).order_by(STALE_REBUILDS.c.id)
        if suspect_host is not None:
            q = q.where(STALE_REBUILDS.c.suspect_host == suspect_host)
        if unresolved:
            q = q.where(STALE_REBUILDS.c.resolved_at.is_(None))
        return self._select(q)

    @write
    def reserved_taken(self, reserved_host, host_id, host_name,
                       original_reason, at):
        def work(c):
            c.execute(RESERVED.insert(), dict(
                reserved_host=reserved_host, host_id=host_id,
                host_name=host_name, original_reason=original_reason,
                taken_at=at))
        return self._write(work)

    @write
    def reserved_returned(self, reserved_host, at, outcome):
        """Close the open row of ``reserved_host``."""
        def work(c):
            c.execute(RESERVED.update().where(sa.and_(
                RESERVED.c.reserved_host == reserved_host,
                RESERVED.c.returned_at.is_(None))).values(
                    returned_at=at, outcome=outcome))
        return self._write(work)

    def reserved_in_use(self):
        """Open rows: [{reserved_host, host_id, host_name,
        original_reason, taken_at}], oldest first."""
        return self._select(sa.select(RESERVED).where(
            RESERVED.c.returned_at.is_(None)).order_by(RESERVED.c.id))

    def reserved_history(self):
        return self._select(sa.select(RESERVED).order_by(RESERVED.c.id))

    @write
    def evidence_saved(self, host_name, method, at, evidence):
        """Keep ``evidence`` (a JSON-able dict) for one fencing method of
        one host, replacing what was kept for it."""
        where = sa.and_(BMC_EVIDENCE.c.host_name == host_name,
                        BMC_EVIDENCE.c.method == method)
        # Replicas sharing a journal write the same host's row at once
        # (each reads every BMC at its start): MariaDB may then end one
        # update-or-insert as a deadlock victim; _write tries it again.
        def work(c):
            done = c.execute(BMC_EVIDENCE.update().where(where).values(
                at=at, evidence=evidence)).rowcount
            if not done:
                c.execute(BMC_EVIDENCE.insert(), dict(
                    host_name=host_name, method=method, at=at,
                    evidence=evidence))
        return self._write(work)

    def evidence(self):
        """{(host name, method): evidence dict} of every kept row."""
        rows = self._select(sa.select(BMC_EVIDENCE).order_by(
            BMC_EVIDENCE.c.id))
        return {(r["host_name"], r["method"]): r["evidence"] for r in rows}

    # -- instance repair ----------------------------------------------------
    @write
    def repair_started(self, server_id, host_name, action, at, step=None,
                       verdict=None, outcome="running", detail="",
                       finished_at=None):
        """A repair row (an action sent, or a verdict closing a case);
        returns its id."""
        def work(c):
            res = c.execute(REPAIRS.insert(), dict(
                server_id=server_id, host_name=host_name, action=action,
                step=step, verdict=verdict, started_at=at,
                finished_at=finished_at, outcome=outcome, detail=detail))
            return res.inserted_primary_key[0]
        return self._write(work)

    @write
    def repair_finished(self, row_id, at, outcome, detail=""):
        def work(c):
            c.execute(REPAIRS.update().where(REPAIRS.c.id == row_id).values(
                finished_at=at, outcome=outcome, detail=detail))
        return self._write(work)

    def repairs(self, server_id=None, since=None, limit=None):
        """Repair rows, oldest first (of one server when given; at or after
        ``since``; the newest ``limit``)."""
        q = sa.select(REPAIRS)
        if server_id is not None:
            q = q.where(REPAIRS.c.server_id == server_id)
        if since is not None:
            q = q.where(REPAIRS.c.started_at >= since)
        if limit is not None:
            rows = self._select(q.order_by(REPAIRS.c.id.desc()).limit(limit))
            return rows[::-1]
        return self._select(q.order_by(REPAIRS.c.id))

    # -- drains -------------------------------------------------------------
    @write
    def drain_saved(self, host_id, host_name, since, at, started_at, state,
                    next_pass_at=None, failed_at=None):
        """Keep what the drain of ``host_id`` that began when the host
        entered draining at ``since`` knows (``state``, a JSON-able dict),
        replacing what was kept for it."""
        where = sa.and_(DRAIN_RUNS.c.host_id == host_id,
                        DRAIN_RUNS.c.since == since,
                        DRAIN_RUNS.c.ended_at.is_(None))
        values = dict(host_name=host_name, updated_at=at, state=state,
                      started_at=started_at, next_pass_at=next_pass_at,
                      failed_at=failed_at)

        def work(c):
            if not c.execute(DRAIN_RUNS.update().where(where).values(
                    **values)).rowcount:
                c.execute(DRAIN_RUNS.insert(), dict(
                    values, host_id=host_id, since=since))
        return self._write(work)

    @write
    def drain_ended(self, host_id, at):
        """Every open drain row of ``host_id`` ended at ``at``; returns
        how many."""
        def work(c):
            return c.execute(DRAIN_RUNS.update().where(sa.and_(
                DRAIN_RUNS.c.host_id == host_id,
                DRAIN_RUNS.c.ended_at.is_(None))).values(
                    ended_at=at, updated_at=at)).rowcount
        return self._write(work)

    def drain_run(self, host_id, since):
        """The open row of the drain of ``host_id`` that began at
        ``since``, or None."""
        rows = self._select(sa.select(DRAIN_RUNS).where(sa.and_(
            DRAIN_RUNS.c.host_id == host_id, DRAIN_RUNS.c.since == since,
            DRAIN_RUNS.c.ended_at.is_(None))).order_by(
                DRAIN_RUNS.c.id.desc()).limit(1))
        return rows[0] if rows else None

    def drain_runs(self, host_id=None):
        return self._rows(DRAIN_RUNS, host_id)

    # -- reads ------------------------------------------------------------------
    def latest(self):
        """{host_id: record dict} from each host's last transition."""
        last = sa.select(TRANSITIONS.c.host_id,
                         sa.func.max(TRANSITIONS.c.id).label("id")) \
            .group_by(TRANSITIONS.c.host_id).subquery()
        q = sa.select(TRANSITIONS.c.host_id, TRANSITIONS.c.record).join(
            last, TRANSITIONS.c.id == last.c.id)
        with self.engine.connect() as c:
            return {row.host_id: row.record for row in c.execute(q)}

    def _select(self, q):
        with self.engine.connect() as c:
            return [dict(r._mapping) for r in c.execute(q)]

    def _rows(self, table, host_id):
        q = sa.select(table).order_by(table.c.id)
        if host_id:
            q = q.where(table.c.host_id == host_id)
        return self._select(q)

    def transitions(self, host_id=None):
        return self._rows(TRANSITIONS, host_id)

    def actions(self, host_id=None):
        return self._rows(ACTIONS, host_id)

    def evacuations(self, host_id=None):
        return self._rows(EVACUATIONS, host_id)

    # -- history (read only) ----------------------------------------------------
    def history(self, host_id, since=None, until=None, after=None,
                limit=100):
        """A host's transitions, actions and evacuations merged in time
        order (ties: transitions, then actions, then evacuations, each by
        id): at most ``limit`` entries at or after ``since`` and before
        ``until`` (epoch seconds), after the entry ``after`` (a (kind, id)
        pair from an earlier page, kind in HISTORY_KINDS). Each entry is
        its row as a dict plus ``entry`` (its kind) and ``at`` (the row's
        time).
        Raises KeyError for an ``after`` that is no row of this host."""
        position = None
        if after is not None:
            kind, row_id = after
            table, column, rank = _HISTORY[kind]
            q = sa.select(column).where(sa.and_(table.c.id == row_id,
                                                table.c.host_id == host_id))
            with self.engine.connect() as c:
                at = c.execute(q).scalar()
            if at is None:
                raise KeyError(after)
            position = (at, rank, row_id)
        merged = []
        for kind, (table, column, rank) in _HISTORY.items():
            q = sa.select(table).where(table.c.host_id == host_id)
            if since is not None:
                q = q.where(column >= since)
            if until is not None:
                q = q.where(column < until)
            if position is not None:
                at, prank, pid = position
                later = column > at
                if rank > prank:
                    later = sa.or_(later, column == at)
                elif rank == prank:
                    later = sa.or_(later, sa.and_(column == at,
                                                  table.c.id > pid))
                q = q.where(later)
            q = q.order_by(column, table.c.id).limit(limit)
            for row in self._select(q):
                row["entry"] = kind
                row["at"] = row[column.name]
                merged.append((row["at"], rank, row["id"], row))
        merged.sort(key=lambda t: t[:3])
        return [t[3] for t in merged[:limit]]

    def evacuations_finished(self, since):
        """Evacuation rows finished at or after ``since`` (epoch
        seconds), in finishing order."""
        return self._select(sa.select(EVACUATIONS).where(
            EVACUATIONS.c.finished_at >= since).order_by(
                EVACUATIONS.c.finished_at, EVACUATIONS.c.id))

    def close(self):
        self.engine.dispose()
