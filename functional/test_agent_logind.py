"""The agent's logind client (instanceha.agent.shutdown.SystemLogind,
D-Bus through jeepney) against a fake logind on a private dbus-daemon:
the lock is a real file descriptor passed over the bus; the wait is
capped by InhibitDelayMaxSec read from logind; with no engine answering
the lock is released at the bound; a cancelled shutdown takes it again.

Skipped without dbus-daemon (Debian's dbus package), failed then under
INSTANCEHA_REQUIRE_SERVICES=1. Budgets: the bound is 2 s; waits of 30 s.
"""

import os

import pytest

from functional import fake_logind
from functional import waiting
from instanceha.agent import shutdown
from instanceha.heartbeat import keys
from instanceha.heartbeat import protocol

RING = keys.Keyring(keys.Key.from_secret(b"h" * 40))


@pytest.fixture
def bus(tmp_path):
    if fake_logind.dbus_daemon() is None:
        if os.environ.get("INSTANCEHA_REQUIRE_SERVICES") == "1":
            pytest.fail("dbus-daemon not found (Debian's dbus package)")
        pytest.skip("dbus-daemon not found (Debian's dbus package)")
    private = fake_logind.PrivateBus(tmp_path)
    fake = fake_logind.FakeLogind(private.address, delay_max=2.0)
    yield private, fake
    fake.close()
    private.close()


def test_no_answer_releases_the_lock_at_loginds_bound(bus):
    private, fake = bus
    sent = []
    drain = shutdown.ShutdownDrain(
        shutdown.SystemLogind(bus=private.address), RING, "compute-1",
        sent.append, lambda: 1_800_000_000.0, 600.0, resend=0.5)
    try:
        assert drain.start() is True
        assert drain.timeout == 2.0           # InhibitDelayMaxSec
        assert fake.locks[0][:4] == ("shutdown", "instanceha-agent",
                                     "drain servers before shutdown",
                                     "delay")
        assert fake.held()
        fake.prepare(True)
        waiting.wait_for(lambda: not fake.held(), 30,
                         "the lock released at the bound")
        waiting.wait_for(lambda: drain.outcomes, 30, "the outcome")
        outcome, waited = drain.outcomes[0]
        assert outcome == shutdown.TIMED_OUT and 1.5 <= waited < 20
        requests = [protocol.decode(data, RING) for data in sent]
        assert requests and all(r.kind == protocol.DRAIN_HOST
                                for r in requests)
        # logind cancels the shutdown: the lock is taken again.
        fake.prepare(False)
        waiting.wait_for(lambda: len(fake.locks) == 2 and fake.held(), 30,
                         "the lock taken again")
    finally:
        drain.stop()
    waiting.wait_for(lambda: not fake.held(), 30, "the lock released at "
                     "the agent's stop")
