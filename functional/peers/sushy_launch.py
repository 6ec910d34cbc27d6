"""Start sushy-tools' emulator with a fixed power-change delay.

Its fake driver applies a power change a random 1–11 s after the request;
tests need it predictable. ``IHA_REDFISH_POWER_DELAY`` (seconds, default 0)
replaces that random draw. Runs inside the sushy venv; all other arguments
go to the emulator unchanged.
"""

import os
import sys

from sushy_tools.emulator.resources.systems import fakedriver


class _FixedDelay:
    def __init__(self, seconds):
        self.seconds = seconds

    def randint(self, low, high):
        return self.seconds


fakedriver.random = _FixedDelay(int(os.environ.get("IHA_REDFISH_POWER_DELAY", "0")))

from sushy_tools.emulator import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main.main())
