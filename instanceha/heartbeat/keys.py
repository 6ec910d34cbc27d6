"""The shared HMAC keys of the heartbeat: files, key ids, rotation.

A key file holds one line: the secret, at least :data:`MIN_SECRET_BYTES`
bytes once surrounding white space is stripped, taken as its UTF-8 bytes
(so ``openssl rand -hex 32 > agent.key`` gives a 64-byte secret). The file
must not be readable or writable by group or others (mode ``0600`` or
``0400``): a key that others can read lets them forge beats, which keeps a
dead host from being fenced (its beats say it lives).

A key's id (``kid``) is the first 8 hex digits of the SHA-256 of its
secret; every datagram names the kid it was signed with, so a receiver
holding two keys (the current one and the previous one, during a
rotation) verifies with the right one without trying both. The kid
reveals 32 bits of a hash of the secret, nothing usable to forge.

:class:`Key`'s ``repr`` leaves the secret out, so a key printed into a
log line or a traceback shows its kid only.
"""

import dataclasses
import hashlib
import os
import stat
from typing import Optional

from instanceha import errors

MIN_SECRET_BYTES = 32
#: A key file longer than this is not a key file (a wrong path).
MAX_FILE_BYTES = 4096


class KeyFileError(errors.ConfigError):
    """A key file is missing, unreadable, too short or too open; the
    message names the path and the problem (a start-up error)."""


@dataclasses.dataclass(frozen=True)
class Key:
    """One shared secret and its id. ``secret`` is never shown by repr."""
    kid: str
    secret: bytes = dataclasses.field(repr=False)
    #: SHA-256 after the inner and outer padded keys (RFC 2104), made
    #: once: see :meth:`mac`.
    _pads: tuple = dataclasses.field(init=False, repr=False,
                                     compare=False)

    def __post_init__(self):
        secret = self.secret
        if len(secret) > _BLOCK:
            secret = hashlib.sha256(secret).digest()
        secret = secret.ljust(_BLOCK, b"\0")
        object.__setattr__(self, "_pads", (
            hashlib.sha256(secret.translate(_INNER)),
            hashlib.sha256(secret.translate(_OUTER))))

    @classmethod
    def from_secret(cls, secret):
        """The key of ``secret`` (bytes), its kid derived from it."""
        return cls(kid=key_id(secret), secret=bytes(secret))

    def mac(self, data) -> bytes:
        """HMAC-SHA256 of ``data`` with this key: the bytes of
        ``hmac.digest(secret, data, "sha256")``, in half the time (the
        padded key's hash states are made once, not at each datagram:
        at thousands of beats a second that is most of an HMAC's
        cost)."""
        inner, outer = self._pads
        inner = inner.copy()
        inner.update(data)
        outer = outer.copy()
        outer.update(inner.digest())
        return outer.digest()


#: SHA-256's block size, and HMAC's pads (RFC 2104) as translations.
_BLOCK = 64
_INNER = bytes(b ^ 0x36 for b in range(256))
_OUTER = bytes(b ^ 0x5C for b in range(256))


def key_id(secret):
    """First 8 hex digits of SHA-256(secret)."""
    return hashlib.sha256(secret).hexdigest()[:8]


class Keyring:
    """The keys a process accepts: ``current`` (used to sign) and, during
    a rotation, ``previous`` (still accepted, never used to sign). Two
    keys with the same kid are one key."""

    def __init__(self, current: Key, previous: Optional[Key] = None):
        self.current = current
        self.previous = (previous if previous is not None
                         and previous.kid != current.kid else None)
        self._by_kid = {current.kid: current}
        if self.previous is not None:
            self._by_kid[self.previous.kid] = self.previous
        self._by_wire_id = {kid.encode("ascii"): key
                            for kid, key in self._by_kid.items()}

    def get(self, kid) -> Optional[Key]:
        """The key named ``kid``, or None when this keyring has none."""
        return self._by_kid.get(kid)

    def by_wire_id(self, wire_id) -> Optional[Key]:
        """The key named ``wire_id``, the kid's ASCII bytes as a datagram
        carries them, or None."""
        return self._by_wire_id.get(wire_id)

    @property
    def kids(self):
        """The accepted kids, the current one first."""
        return tuple(self._by_kid)

    def __repr__(self):
        return "Keyring(kids=%r)" % (self.kids,)


def load_key(path) -> Key:
    """The key in the file at ``path``; raises :class:`KeyFileError`."""
    path = os.fspath(path)
    try:
        with open(path, "rb") as f:
            mode = os.fstat(f.fileno()).st_mode
            raw = f.read(MAX_FILE_BYTES + 1)
    except OSError as e:
        raise KeyFileError("key file %s: cannot be read (%s)"
                           % (path, e.strerror or e))
    if not stat.S_ISREG(mode):
        raise KeyFileError("key file %s: not a regular file" % path)
    if mode & 0o077:
        raise KeyFileError(
            "key file %s: mode %04o lets group or others reach the key; "
            "chmod 0600 it" % (path, stat.S_IMODE(mode)))
    if len(raw) > MAX_FILE_BYTES:
        raise KeyFileError("key file %s: longer than %d bytes; it should "
                           "hold one line" % (path, MAX_FILE_BYTES))
    secret = raw.strip()
    if b"\n" in secret or b"\r" in secret:
        raise KeyFileError("key file %s: more than one line; it should "
                           "hold the secret on one line" % path)
    if len(secret) < MIN_SECRET_BYTES:
        raise KeyFileError(
            "key file %s: the key is %d bytes, at least %d are needed "
            "(e.g. openssl rand -hex 32)" % (path, len(secret),
                                              MIN_SECRET_BYTES))
    return Key.from_secret(secret)


def load_keyring(path, previous_path=None) -> Keyring:
    """The keyring of the key file ``path`` (current, signs) and,
    when given, ``previous_path`` (still accepted during a rotation).
    Raises :class:`KeyFileError` naming the file and the problem."""
    current = load_key(path)
    previous = load_key(previous_path) if previous_path else None
    return Keyring(current, previous)
