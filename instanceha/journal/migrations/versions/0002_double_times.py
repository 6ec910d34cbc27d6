"""Every time column in double precision (issue 34, part 0).

sa.Float without a precision is a single-precision FLOAT on MariaDB and
MySQL: about 6 significant digits, so an epoch time was kept in steps of
10,000 s. DOUBLE keeps it to the microsecond. PostgreSQL's FLOAT is
already double precision and SQLite's REAL is 8 bytes: nothing to change
there."""

import sqlalchemy as sa
from alembic import op

from instanceha.journal.migrations import legacy

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade():
    if op.get_bind().dialect.name != "mysql":
        return
    nullable = {}
    for table in legacy.metadata().sorted_tables:
        for column in table.columns:
            nullable[(table.name, column.name)] = column.nullable
    for table, column in legacy.TIMES:
        op.alter_column(table, column, type_=sa.Double(),
                        existing_type=sa.Float(),
                        existing_nullable=nullable[(table, column)])


def downgrade():
    raise NotImplementedError("the journal is never downgraded")
