"""Errors that stop the start, shared by the service and the API.

A low module of its own (it imports nothing of instanceha) so that the
operator API can raise them without importing :mod:`instanceha.service`.
"""


class ConfigError(Exception):
    """The configuration cannot work; the message says which option."""


class StartupError(Exception):
    """A start-up step failed before anything was acted on; the message
    names the step (``operator API: cannot bind ...``)."""
