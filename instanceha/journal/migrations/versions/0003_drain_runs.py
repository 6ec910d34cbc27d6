"""What a drain knows, kept across restarts (issue 34, part 4): one row
per drain of a host (a host's drain is named by when it entered
draining, ``since``), written at each pass; instanceha.engine.drain reads
it back when a restarted engine continues the drain."""

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade():
    op.create_table(
        "drain_runs",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("host_id", sa.String(64), nullable=False, index=True),
        sa.Column("host_name", sa.String(255), nullable=False),
        sa.Column("since", sa.Double, nullable=False),
        sa.Column("started_at", sa.Double, nullable=False),
        sa.Column("updated_at", sa.Double, nullable=False),
        sa.Column("next_pass_at", sa.Double),
        sa.Column("failed_at", sa.Double),
        sa.Column("ended_at", sa.Double),
        sa.Column("state", sa.JSON, nullable=False),
    )


def downgrade():
    raise NotImplementedError("the journal is never downgraded")
