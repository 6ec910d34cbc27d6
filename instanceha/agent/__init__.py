"""``instanceha-agent``: the heartbeat agent run on each compute host.

``facts`` reads what the host can tell (nova-compute, libvirt, guests),
``sender`` sends the signed beats, ``control`` receives engines' signed
requests and restarts nova-compute (soft fencing), ``main`` is the
process. It shares only the wire format (:mod:`instanceha.heartbeat`),
its options (:mod:`instanceha.conf.agent`) and the log set-up with the
engine; it imports nothing of the engine, the service or the drivers.
See doc/agent.md.
"""
