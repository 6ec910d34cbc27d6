"""What the demo and the drills say about their working directory (the
configuration, the journal, the engine's log): a temporary one is
removed after a PASS, so the line naming its log says so."""


def log_line(path, temporary):
    """The line naming the engine's log at ``path``."""
    if temporary:
        return ("log: %s (a temporary directory, removed after a PASS; "
                "--workdir DIR keeps it)\n" % path)
    return "log: %s\n" % path


def end_line(workdir, temporary, passed):
    """The line saying what became of ``workdir``: removed (a temporary
    one, after a PASS) or kept."""
    if temporary and passed:
        return "removed %s (a PASS; --workdir DIR keeps it)\n" % workdir
    return "kept for inspection: %s\n" % workdir
