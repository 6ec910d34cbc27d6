"""Imported by pytest before any test module: instanceha selects its
threading backend when first imported (instanceha.backend), and must be
imported before a test module imports oslo.messaging itself, which would
select oslo.service's eventlet backend first (a test file run alone,
such as tests/unit/sources/test_notifications.py, failed to collect)."""

import instanceha  # noqa: F401

import os  # noqa: E402

# No test may arm this machine's watchdog (it would reset the machine):
# instanceha.agent.watchdog refuses /dev/ paths and character devices while
# this is set, in this process and in every process a test starts.
os.environ["INSTANCEHA_NO_REAL_WATCHDOG"] = "1"
