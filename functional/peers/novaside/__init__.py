"""Modules that run inside the Nova venv (put on nova-api's PYTHONPATH)."""
