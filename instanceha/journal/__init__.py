from instanceha.journal.store import Journal  # noqa
