"""Hooks for every test run from this repository (tests/ and functional/):
the run fails when a test wrote to the machine's own instanceha paths
(tests/default_paths_guard.py). pytester drives that check's own test."""

pytest_plugins = ("tests.default_paths_guard", "pytester")
