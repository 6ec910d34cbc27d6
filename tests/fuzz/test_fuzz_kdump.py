"""Fuzz the fence_kdump packet parser and the listener's packet handling:
random bytes and mutated valid packets, from known and unknown senders.

Properties: ``parse_message`` returns "little", "big" or None, and a byte
order exactly for an 8-byte message with the magic and version 1 in that
order; ``handle_packet`` never raises and makes an event only from such a
message from an address mapped to one host (garbage changes nothing).
"""

import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from instanceha.sources import kdump
from tests.fuzz import budget
from tests.fuzz import gen
from tests.unit.sources import helpers

GOOD = (struct.pack("<II", kdump.MAGIC, kdump.VERSION),
        struct.pack(">II", kdump.MAGIC, kdump.VERSION))
HOSTS = [("uuid-1", "compute1"), ("uuid-2", "compute2")]
KNOWN = {"10.0.0.1": "uuid-1", "fd00::2": "uuid-2", "10.0.0.2": "uuid-2",
         "::ffff:10.0.0.1": "uuid-1"}


def oracle(data):
    if len(data) != 8:
        return None
    for order, fmt in (("little", "<II"), ("big", ">II")):
        if struct.unpack(fmt, data) == (kdump.MAGIC, kdump.VERSION):
            return order
    return None


def make_source():
    sink = helpers.Sink()
    conf = helpers.make_conf("kdump", listen_address="127.0.0.1", port=0)
    table = {"compute1": {"10.0.0.1"}, "compute2": {"10.0.0.2", "fd00::2"}}
    source = kdump.KdumpSource(conf, sink, helpers.FakeClock(),
                               lambda: list(HOSTS),
                               resolver=lambda name: table[name])
    source.refresh()
    return source, sink


_SOURCE = []


def check(data, sender):
    if not _SOURCE:
        _SOURCE.append(make_source())
    source, sink = _SOURCE[0]
    order = kdump.parse_message(data)
    assert order == oracle(data), data.hex()
    before = len(sink.events)
    counts = source.health()
    event = source.handle_packet(data, sender)
    after = source.health()
    new = sink.events[before:]
    host = KNOWN.get(sender[0])
    if order is None or host is None:
        assert event is None and not new, (data.hex(), sender)
        key = "dropped_bad" if order is None else "dropped_unknown"
        assert after[key] == counts[key] + 1
    else:
        assert new == [event] and event.host == host
        assert event.detail["byte_order"] == order


SENDERS = st.tuples(
    st.sampled_from(sorted(KNOWN)) | st.ip_addresses().map(str),
    st.integers(0, 65535))



def _gen_packet(rnd, mutated):
    if mutated:
        return gen.mutate_bytes(rnd, rnd.choice(GOOD))
    return bytes(rnd.randrange(256) for _ in range(rnd.choice(
        (8, 8, 8, rnd.randint(0, 70)))))


def _run(counter, data, sender, rnd, mutated):
    counter()
    check(data, sender)
    senders = sorted(KNOWN) + ["127.0.0.1", "fd00::3", "::1"]
    for _ in range(budget.BATCH):
        counter()
        check(_gen_packet(rnd, mutated),
              (rnd.choice(senders), rnd.randint(0, 65535)))


@budget.fuzz_settings(short=300)
@given(data=st.binary(max_size=70) | st.binary(min_size=8, max_size=8),
       sender=SENDERS, rnd=st.randoms(use_true_random=False))
def test_random_bytes(counter, data, sender, rnd):
    _run(counter, data, sender, rnd, mutated=False)


@st.composite
def mutated_packet(draw):
    data = bytearray(draw(st.sampled_from(GOOD)))
    for _ in range(draw(st.integers(1, 3))):
        op = draw(st.integers(0, 3))
        if op == 0 and data:
            i = draw(st.integers(0, len(data) - 1))
            data[i] ^= 1 << draw(st.integers(0, 7))
        elif op == 1:
            data += draw(st.binary(min_size=1, max_size=8))
        elif op == 2:
            del data[draw(st.integers(0, len(data))):]
        else:
            data = data[4:] + data[:4]
    return bytes(data)


@budget.fuzz_settings(short=300)
@given(data=mutated_packet(), sender=SENDERS,
       rnd=st.randoms(use_true_random=False))
def test_mutated_packets(counter, data, sender, rnd):
    _run(counter, data, sender, rnd, mutated=True)


@pytest.mark.parametrize("data", GOOD)
def test_valid_packets_from_known_senders_are_events(data):
    source, sink = make_source()
    assert source.handle_packet(data, ("10.0.0.1", 7410)) is not None
    assert [e.host for e in sink.events] == ["uuid-1"]
