"""Fakes for the agent's tests: configuration, clocks, sockets, events,
command runners. Nothing here sleeps."""

import socket
import subprocess

from instanceha.conf import agent as agent_conf


def make_conf(**overrides):
    overrides.setdefault("engines", ["192.0.2.1:7411"])
    # never the machine's own /sys: a test names its file
    overrides.setdefault("system_uuid_file", "")
    # never the machine's /run: a test that keeps nonces names its file
    overrides.setdefault("nonce_file", "")
    conf = agent_conf.new_conf()
    conf([], project="instanceha", default_config_files=[])
    for name, value in overrides.items():
        conf.set_override(name, value, "agent")
    return conf


class Clock:
    def __init__(self, now=1000.0):
        self.now = now

    def __call__(self):
        return self.now

    def advance(self, seconds):
        self.now += seconds


class FakeSocket:
    """Records binds and datagrams; ``fail`` makes sendto raise it."""

    def __init__(self, family, kind, registry=None):
        self.family = family
        self.kind = kind
        self.bound = None
        self.sent = []
        self.fail = None
        self.closed = False
        self.blocking = True
        if registry is not None:
            registry.append(self)

    def setblocking(self, flag):
        self.blocking = flag

    def bind(self, address):
        self.bound = address

    def sendto(self, data, address):
        if self.fail is not None:
            raise self.fail
        self.sent.append((data, address))

    def close(self):
        self.closed = True


class Sockets:
    """A socket factory keeping what it made."""

    def __init__(self):
        self.made = []

    def __call__(self, family, kind):
        return FakeSocket(family, kind, self.made)


def resolver(host, port, type=0):
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    return [(family, type, 0, "", (host, port))]


class StopAfter:
    """An event whose ``wait`` advances a fake clock instead of waiting
    and reports set after ``waits`` calls."""

    def __init__(self, clock, waits):
        self.clock = clock
        self.left = waits
        self.waited = []

    def is_set(self):
        return self.left <= 0

    def wait(self, seconds):
        self.waited.append(seconds)
        self.clock.advance(seconds)
        self.left -= 1
        return self.left <= 0


class Runner:
    """subprocess.run's stand-in: records commands, answers ``result``."""

    def __init__(self, returncode=0, stdout="", stderr="", raises=None):
        self.calls = []
        self.returncode = returncode
        self.stdout = stdout
        self.stderr = stderr
        self.raises = raises

    def __call__(self, cmd, **kwargs):
        self.calls.append((cmd, kwargs))
        if self.raises is not None:
            raise self.raises
        return subprocess.CompletedProcess(cmd, self.returncode,
                                           self.stdout, self.stderr)
