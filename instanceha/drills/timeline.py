"""The live timeline the demo and the drills print: one line per event,
with the seconds since the start."""

import threading
import time


class Timeline:
    """``say(text)`` prints ``  [  1.2s] text`` at once; ``mark`` names
    the moment (the first time only) for a summary."""

    def __init__(self, out, clock=time.monotonic):
        self.clock = clock
        self.t0 = clock()
        self.out = out
        self.marks = {}
        self.lock = threading.Lock()

    def elapsed(self):
        return self.clock() - self.t0

    def say(self, text, mark=None):
        with self.lock:
            t = self.elapsed()
            if mark and mark not in self.marks:
                self.marks[mark] = t
            self.out.write("  [%5.1fs] %s\n" % (t, text))
            self.out.flush()
