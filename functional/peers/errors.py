import os


class PeerError(RuntimeError):
    """A peer did not start or misbehaved. Names the peer and its log file."""

    def __init__(self, peer, message, log=None, tail_lines=30):
        self.peer = peer
        self.log = str(log) if log else None
        text = "peer %s: %s" % (peer, message)
        if self.log:
            text += " (log: %s)" % self.log
            tail = _tail(self.log, tail_lines)
            if tail:
                text += "\n--- last lines of %s ---\n%s" % (self.log, tail)
        super().__init__(text)


class PeerMissing(PeerError):
    """A peer's program or service is not installed or not reachable.

    Tests skip on it unless INSTANCEHA_REQUIRE_SERVICES=1, where it fails.
    """


def _tail(path, n):
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - 64 * 1024))
            lines = f.read().decode("utf-8", "replace").splitlines()
    except OSError:
        return ""
    return "\n".join(lines[-n:])
