"""Key files: the format, the start-up errors naming the file, rotation,
a key's repr that never shows the secret, and its MAC."""

import hashlib
import hmac

from hypothesis import given, settings, strategies as st
import pytest

from instanceha import errors
from instanceha.heartbeat import keys
from tests.unit.heartbeat import helpers


def test_a_key_file_gives_its_secret_and_kid(tmp_path):
    path = helpers.write_key(tmp_path / "agent.key", b"  " + b"s" * 32)
    key = keys.load_key(path)
    assert key.secret == b"s" * 32
    assert key.kid == hashlib.sha256(b"s" * 32).hexdigest()[:8]


def test_the_secret_never_shows_in_repr():
    text = repr(helpers.KEY) + repr(helpers.KEYRING) + str(helpers.KEY)
    assert helpers.KEY.kid in text
    assert "kkkk" not in text


@pytest.mark.parametrize("secret,mode,problem", [
    (b"s" * 31, 0o600, "at least 32"),
    (b"s" * 32 + b"\n" + b"t" * 32, 0o600, "more than one line"),
    (b"s" * 40, 0o640, "chmod 0600"),
    (b"s" * 40, 0o604, "chmod 0600"),
    (b"s" * 5000, 0o600, "longer than"),
])
def test_a_bad_key_file_is_a_start_up_error_naming_it(tmp_path, secret,
                                                      mode, problem):
    path = helpers.write_key(tmp_path / "agent.key", secret, mode)
    with pytest.raises(keys.KeyFileError) as e:
        keys.load_keyring(path)
    assert str(path) in str(e.value)
    assert problem in str(e.value)
    assert isinstance(e.value, errors.ConfigError)


def test_a_missing_key_file_is_named(tmp_path):
    with pytest.raises(keys.KeyFileError, match="nope.key: cannot be read"):
        keys.load_keyring(tmp_path / "nope.key")


def test_a_directory_is_not_a_key_file(tmp_path):
    (tmp_path / "d").mkdir(mode=0o700)
    with pytest.raises(keys.KeyFileError, match="not a regular file|cannot"):
        keys.load_key(tmp_path / "d")


def test_a_missing_previous_key_is_an_error_too(tmp_path):
    path = helpers.write_key(tmp_path / "agent.key")
    with pytest.raises(keys.KeyFileError, match="old.key"):
        keys.load_keyring(path, tmp_path / "old.key")


def test_rotation_accepts_both_and_signs_with_the_current(tmp_path):
    new = helpers.write_key(tmp_path / "new.key", helpers.SECRET)
    old = helpers.write_key(tmp_path / "old.key", helpers.OTHER_SECRET)
    ring = keys.load_keyring(new, old)
    assert ring.current == helpers.KEY
    assert ring.get(helpers.OTHER_KEY.kid) == helpers.OTHER_KEY
    assert ring.kids == (helpers.KEY.kid, helpers.OTHER_KEY.kid)
    assert ring.get("00000000") is None


def test_the_same_key_twice_is_one_key():
    ring = keys.Keyring(helpers.KEY, helpers.KEY)
    assert ring.previous is None
    assert ring.kids == (helpers.KEY.kid,)


@settings(max_examples=200, deadline=None)
@given(st.binary(min_size=1, max_size=300), st.binary(max_size=1100))
def test_mac_is_hmac_sha256(secret, data):
    """Key.mac keeps the padded key's hash states; its MACs are exactly
    the standard library's HMAC-SHA256, for keys shorter and longer than
    a block."""
    key = keys.Key.from_secret(secret)
    assert key.mac(data) == hmac.digest(secret, data, "sha256")
    assert key.mac(data) == key.mac(data)   # the kept states unchanged


def test_wire_ids_find_the_keys_of_a_rotation():
    ring = keys.Keyring(helpers.KEY, helpers.OTHER_KEY)
    assert ring.by_wire_id(helpers.KEY.kid.encode()) is helpers.KEY
    assert ring.by_wire_id(helpers.OTHER_KEY.kid.encode()) is \
        helpers.OTHER_KEY
    assert ring.by_wire_id(b"deadbeef") is None
    assert ring.by_wire_id(helpers.KEY.kid) is None     # bytes only
