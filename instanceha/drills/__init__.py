"""Drills: ``instanceha demo --scenario NAME``.

Each drill runs the real engine on the built-in simulator, makes one
thing go wrong (or asks for one planned operation), prints what happens
as it happens, and ends with a one-line verdict read from the simulated
world and the engine's own record. See doc/drills.md.

Run as its own process (``python -m instanceha.drills NAME``, which
``instanceha demo --scenario`` starts): some drills run the simulated
hosts' heartbeat agents, whose code the console scripts must not import
(.importlinter). :mod:`instanceha.drills.registry` and
:mod:`instanceha.drills.timeline` import nothing of instanceha and are
what the console script reads.
"""
