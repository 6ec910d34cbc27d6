"""Imported by pytest before any test module: instanceha selects its
threading backend when first imported (instanceha.backend), and must be
imported before a test module imports oslo.messaging itself, which would
select oslo.service's eventlet backend first (a test file run alone,
such as tests/unit/sources/test_notifications.py, failed to collect)."""

import instanceha  # noqa: F401
