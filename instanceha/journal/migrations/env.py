"""Alembic's environment for the journal: run on the connection that
instanceha.journal.migrate hands over (it holds the upgrade lock)."""

from alembic import context

from instanceha.journal.migrations import VERSION_TABLE

connection = context.config.attributes["connection"]
context.configure(connection=connection, version_table=VERSION_TABLE)
with context.begin_transaction():
    context.run_migrations()
