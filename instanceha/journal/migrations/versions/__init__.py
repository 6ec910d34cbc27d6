"""Revisions of the journal schema (loaded by alembic by file name)."""
