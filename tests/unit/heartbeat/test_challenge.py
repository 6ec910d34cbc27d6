"""The challenge datagram, a beat's echoes, the engine's Issuer and the
agent's Echoes (issue 34, part 7). No sockets, no sleep."""

import pytest

from instanceha.heartbeat import challenge
from instanceha.heartbeat import protocol
from tests.unit.heartbeat import helpers
from tests.unit.heartbeat.test_protocol import beat_body, sign

RING = helpers.KEYRING
ISSUER = b"E" * 8


def nonce(i):
    return bytes([i]) * 16


def counter():
    """A stand-in for os.urandom: distinct bytes at each call."""
    state = {"n": 0}

    def draw(size):
        state["n"] += 1
        return bytes([state["n"] % 256]) * size
    return draw


# -- the datagram -------------------------------------------------------------

def test_a_challenge_round_trips_and_names_its_host():
    ch = challenge.Challenge(ISSUER, nonce(7), "compute-1")
    data = challenge.encode(ch, helpers.KEY)
    assert challenge.decode_signed(data, RING) == (ch, helpers.KEY.kid)
    assert data[5] == protocol.CHALLENGE


def test_a_challenge_is_not_read_where_challenges_are_not_expected():
    data = challenge.encode(challenge.Challenge(ISSUER, nonce(1), "c"),
                            helpers.KEY)
    with pytest.raises(protocol.Dropped) as e:
        protocol.decode(data, RING)
    assert e.value.reason == "malformed"


def test_a_forged_or_short_challenge_is_dropped():
    data = challenge.encode(challenge.Challenge(ISSUER, nonce(1), "c"),
                            helpers.OTHER_KEY)
    with pytest.raises(protocol.Dropped) as e:
        challenge.decode_signed(data, RING)
    assert e.value.reason == "unknown_key"
    with pytest.raises(protocol.Dropped) as e:
        challenge.decode_signed(sign(b"x" * 10, kind=protocol.CHALLENGE),
                                RING)
    assert e.value.reason == "malformed"


@pytest.mark.parametrize("bad", [
    challenge.Challenge(b"short", nonce(1), "c"),
    challenge.Challenge(ISSUER, b"short", "c"),
    challenge.Challenge(ISSUER, nonce(1), ""),
])
def test_a_challenge_the_decoder_would_refuse_is_not_encoded(bad):
    with pytest.raises(ValueError):
        challenge.encode(bad, helpers.KEY)


# -- a beat's echoes ----------------------------------------------------------

@pytest.mark.parametrize("echoes", [(), (nonce(1),),
                                    tuple(nonce(i) for i in range(8))])
def test_a_beats_echoes_round_trip(echoes):
    beat = helpers.beat(echoes=echoes)
    got = protocol.decode(protocol.encode_beat(beat, helpers.KEY), RING)
    assert got == beat and got.echoes == echoes


def test_an_older_agents_beat_has_no_echoes():
    beat = protocol.decode(sign(beat_body(echoes=None)), RING)
    assert beat.echoes == () and beat.host == "compute-1"


def test_echoes_that_do_not_fit_are_malformed():
    for body in (beat_body(extra=b"\x09" + b"x" * 200, echoes=None),
                 beat_body(extra=b"\x02" + b"x" * 20, echoes=None)):
        with pytest.raises(protocol.Dropped) as e:
            protocol.decode(sign(body), RING)
        assert e.value.reason == "malformed"
    with pytest.raises(ValueError):
        protocol.encode_beat(helpers.beat(echoes=(b"short",)), helpers.KEY)
    with pytest.raises(ValueError):
        protocol.encode_beat(helpers.beat(
            echoes=tuple(nonce(i) for i in range(9))), helpers.KEY)


def test_beats_differing_in_echoes_only_share_their_checked_texts(
        monkeypatch):
    monkeypatch.setattr(protocol, "_IDENTITIES", {})
    a = protocol.decode(protocol.encode_beat(
        helpers.beat(echoes=(nonce(1),)), helpers.KEY), RING)
    b = protocol.decode(protocol.encode_beat(
        helpers.beat(seq=2, echoes=(nonce(2), nonce(3))), helpers.KEY), RING)
    assert len(protocol._IDENTITIES) == 1
    assert (a.echoes, b.echoes) == ((nonce(1),), (nonce(2), nonce(3)))
    assert a.facts is b.facts


# -- the engine's nonces ------------------------------------------------------

def test_only_the_last_window_nonces_prove():
    issuer = challenge.Issuer(window=3, random=counter())
    assert len(issuer.issuer) == 8
    assert not issuer.proves((b"anything",)) and issuer.newest is None
    drawn = [issuer.draw() for _ in range(5)]
    assert len(set(drawn)) == 5 and issuer.newest == drawn[-1]
    for old in drawn[:2]:
        assert not issuer.proves((old,))
    for recent in drawn[2:]:
        assert issuer.proves((nonce(99), recent))
    assert not issuer.proves(())


def test_nonces_come_from_the_system_random_source_by_default():
    a, b = challenge.Issuer(), challenge.Issuer()
    assert a.issuer != b.issuer and a.draw() != b.draw()


# -- the agent's echoes -------------------------------------------------------

def test_the_agent_echoes_the_newest_challenge_of_each_engine():
    echoes = challenge.Echoes(keep_for=100)
    assert echoes.current(0.0) == ()
    echoes.heard(challenge.Challenge(b"A" * 8, nonce(1), "c"), 1.0)
    echoes.heard(challenge.Challenge(b"B" * 8, nonce(2), "c"), 2.0)
    echoes.heard(challenge.Challenge(b"A" * 8, nonce(3), "c"), 3.0)
    assert echoes.current(3.0) == (nonce(3), nonce(2))


def test_an_engine_no_longer_heard_is_no_longer_echoed():
    echoes = challenge.Echoes(keep_for=10)
    echoes.heard(challenge.Challenge(b"A" * 8, nonce(1), "c"), 0.0)
    echoes.heard(challenge.Challenge(b"B" * 8, nonce(2), "c"), 5.0)
    assert echoes.current(10.0) == (nonce(2), nonce(1))
    assert echoes.current(10.5) == (nonce(2),)
    assert echoes.current(15.5) == ()


def test_the_echoes_are_bounded_newest_engines_first():
    echoes = challenge.Echoes(keep_for=100, limit=3)
    for i in range(5):
        echoes.heard(challenge.Challenge(bytes([i]) * 8, nonce(i), "c"),
                     float(i))
    assert echoes.current(5.0) == (nonce(4), nonce(3), nonce(2))


def test_a_nonce_proves_nothing_once_older_than_its_bound():
    # The rounds stall (the challenge thread held up): a nonce still
    # among the last `window` proves no beat once older than max_age.
    issuer = challenge.Issuer(window=3, max_age=8.0)
    drawn = issuer.draw(100.0)
    assert issuer.proves((drawn,), 108.0)
    assert not issuer.proves((drawn,), 108.5)
    newer = issuer.draw(109.0)
    assert issuer.proves((drawn, newer), 110.0)


# -- the answer and the poison pill (issue 37) --------------------------------

def test_a_challenge_carries_the_answer_and_the_pill():
    ch = challenge.Challenge(ISSUER, nonce(7), "compute-1", nonce(9),
                             acting=True, condemned=True)
    assert challenge.decode_signed(challenge.encode(ch, helpers.KEY),
                                   RING)[0] == ch
    plain = challenge.Challenge(ISSUER, nonce(7), "compute-1")
    back = challenge.decode_signed(challenge.encode(plain, helpers.KEY),
                                   RING)[0]
    assert (back.answer, back.acting, back.condemned) == (None, False,
                                                          False)


def test_an_older_engines_challenge_has_no_answer():
    body = ISSUER + nonce(3) + bytes((1,)) + b"c"
    back = challenge.decode_signed(sign(body, kind=protocol.CHALLENGE),
                                   RING)[0]
    assert back == challenge.Challenge(ISSUER, nonce(3), "c")
    with pytest.raises(protocol.Dropped) as e:
        challenge.decode_signed(sign(body + b"\x01",
                                     kind=protocol.CHALLENGE), RING)
    assert e.value.reason == "malformed"
