"""Is the journal taking writes? While writes fail, status says the journal
is degraded (and since when), and every decision waits for it; the first
write that succeeds clears it."""

import threading
from typing import Callable, Dict, Optional, Tuple

import structlog

LOG = structlog.get_logger("instanceha.engine")


class JournalHealth:

    def __init__(self, clock: Callable[[], float]) -> None:
        self.clock = clock
        self._lock = threading.Lock()
        #: (since, error) while writes fail
        self._down: Optional[Tuple[float, str]] = None

    def note(self, error: Optional[BaseException]) -> None:
        """A journal write's outcome: None when it succeeded, else the
        exception it raised."""
        with self._lock:
            if error is None:
                if self._down is not None:
                    LOG.warning("journal_recovered", reason="writes succeed "
                                "again; held work resumes",
                                down_for=round(self.clock()
                                               - self._down[0], 1))
                self._down = None
            elif self._down is None:
                self._down = (self.clock(), "%s: %s" % (
                    type(error).__name__, error))

    def degraded(self) -> Dict[str, str]:
        """{what: why} for what does not work now."""
        with self._lock:
            down = self._down
        if down is None:
            return {}
        return {"journal": "writes failing for %.0fs (%s); every decision "
                           "waits for it" % (self.clock() - down[0],
                                             down[1][:300])}
