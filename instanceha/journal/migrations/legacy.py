"""The journal's schema as instanceha created it before migrations
(metadata.create_all, no version table): frozen here, never edited. The
baseline revision creates it; a journal found in this shape is adopted
at the baseline (instanceha.journal.migrate)."""

import sqlalchemy as sa

#: (table, column) of every time kept in single precision by this schema
#: (sa.Float: FLOAT on MariaDB/MySQL, about 6 significant digits).
TIMES = (
    ("transitions", "at"),
    ("actions", "started_at"), ("actions", "finished_at"),
    ("evacuations", "requested_at"), ("evacuations", "finished_at"),
    ("stale_rebuilds", "recorded_at"), ("stale_rebuilds", "resolved_at"),
    ("reserved_hosts", "taken_at"), ("reserved_hosts", "returned_at"),
    ("bmc_evidence", "at"),
    ("instance_repairs", "started_at"), ("instance_repairs", "finished_at"),
)


def metadata():
    """A new MetaData holding the legacy tables."""
    md = sa.MetaData()
    sa.Table(
        "transitions", md,
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("host_id", sa.String(64), nullable=False, index=True),
        sa.Column("host_name", sa.String(255), nullable=False),
        sa.Column("at", sa.Float, nullable=False),
        sa.Column("src", sa.String(32), nullable=False),
        sa.Column("dst", sa.String(32), nullable=False),
        sa.Column("event", sa.String(64), nullable=False),
        sa.Column("source", sa.String(32), nullable=False),
        sa.Column("reason", sa.Text, nullable=False),
        sa.Column("record", sa.JSON, nullable=False),
    )
    sa.Table(
        "actions", md,
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("host_id", sa.String(64), nullable=False, index=True),
        sa.Column("host_name", sa.String(255), nullable=False),
        sa.Column("kind", sa.String(32), nullable=False),
        sa.Column("started_at", sa.Float, nullable=False),
        sa.Column("finished_at", sa.Float),
        sa.Column("outcome", sa.String(64)),
        sa.Column("detail", sa.Text),
    )
    sa.Table(
        "evacuations", md,
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("host_id", sa.String(64), nullable=False, index=True),
        sa.Column("host_name", sa.String(255), nullable=False),
        sa.Column("server_id", sa.String(64), nullable=False, index=True),
        sa.Column("requested_at", sa.Float, nullable=False),
        sa.Column("finished_at", sa.Float),
        sa.Column("status", sa.String(32), nullable=False),
        sa.Column("dest_host", sa.String(255)),
        sa.Column("detail", sa.Text),
    )
    sa.Table(
        "stale_rebuilds", md,
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("server_id", sa.String(64), nullable=False),
        sa.Column("source_id", sa.String(64), nullable=False),
        sa.Column("source_host", sa.String(255), nullable=False),
        sa.Column("suspect_host", sa.String(255), nullable=False,
                  index=True),
        sa.Column("recorded_at", sa.Float, nullable=False),
        sa.Column("resolved_at", sa.Float),
        sa.Column("resolution", sa.Text),
    )
    sa.Table(
        "reserved_hosts", md,
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("reserved_host", sa.String(255), nullable=False,
                  index=True),
        sa.Column("host_id", sa.String(64), nullable=False),
        sa.Column("host_name", sa.String(255), nullable=False),
        sa.Column("original_reason", sa.Text),
        sa.Column("taken_at", sa.Float, nullable=False),
        sa.Column("returned_at", sa.Float),
        sa.Column("outcome", sa.Text),
    )
    sa.Table(
        "bmc_evidence", md,
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("host_name", sa.String(255), nullable=False, index=True),
        sa.Column("method", sa.String(512), nullable=False),
        sa.Column("at", sa.Float, nullable=False),
        sa.Column("evidence", sa.JSON, nullable=False),
    )
    sa.Table(
        "instance_repairs", md,
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("server_id", sa.String(64), nullable=False, index=True),
        sa.Column("host_name", sa.String(255)),
        sa.Column("action", sa.String(32), nullable=False),
        sa.Column("step", sa.Integer),
        sa.Column("verdict", sa.String(32)),
        sa.Column("started_at", sa.Float, nullable=False),
        sa.Column("finished_at", sa.Float),
        sa.Column("outcome", sa.String(32)),
        sa.Column("detail", sa.Text),
    )
    return md
