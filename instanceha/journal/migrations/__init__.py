"""The journal's schema migrations (alembic revisions in versions/), run
by instanceha.journal.migrate: ``instanceha db upgrade`` and each start
of ``instanceha run``."""

#: The table that holds the journal's schema revision.
VERSION_TABLE = "alembic_version"
