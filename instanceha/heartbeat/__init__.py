"""The heartbeat wire format shared by the agent and the engine.

``protocol`` encodes and decodes the signed datagrams (a host's beat, an
engine's request to its agent); ``keys`` reads the HMAC keys (a host's
own key, the engines' master key each host's key is derived from, the
shared key of older deployments; the previous one during a rotation);
``replay`` refuses datagrams seen before or held back too long.

Pure: no threads, no sockets, no clock reads (time arrives in arguments);
the only I/O is reading key files in :func:`keys.load_keyring`. Imports
nothing of the engine, the service, the sources or the drivers, so the
agent (a separate process on each compute host) needs none of them.
"""
