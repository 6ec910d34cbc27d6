"""Baseline: the journal's tables as instanceha created them before
migrations (migrations/legacy.py). Creates only the tables that are
missing, so a journal of an older release (made by metadata.create_all,
perhaps before some table existed) is completed and adopted here."""

from alembic import op

from instanceha.journal.migrations import legacy

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade():
    bind = op.get_bind()
    legacy.metadata().create_all(bind, checkfirst=True)


def downgrade():
    raise NotImplementedError("the journal is never downgraded")
