"""The HMAC keys of the heartbeat: files, key ids, rotation, and each
host's own key derived from the engines' master key.

Two kinds of key (doc/agent.md, "Keys"):

* a **host key** speaks for one host only. The engines derive it from
  their master key and the host's name (:func:`derive_host_key`:
  HMAC-SHA256 of the master over a fixed label and the name); the master
  never leaves the engines, and ``instanceha agent-key HOST`` writes the
  host's key file for the operator's deployment tool. A datagram signed
  with host A's key that names host B is dropped (``wrong_host``, see
  :mod:`instanceha.heartbeat.protocol`), so root on one compute host can
  speak for that host alone;
* the **shared key** of older deployments, the same secret on every host
  and engine: whoever holds it speaks for every host. Engines accept it
  only while ``[agent] accept_shared_key`` is true (the upgrade window).

A shared key file holds one line: the secret, at least
:data:`MIN_SECRET_BYTES` bytes once surrounding white space is stripped,
taken as its UTF-8 bytes (so ``openssl rand -hex 32 > agent.key`` gives a
64-byte secret); the master key file has the same form. A host key file
holds one line ``ihk1:<64 hex digits>:<host name>``: the 32-byte derived
secret and the host it speaks for (an agent refuses to start with another
host's key). Every file must not be readable or writable by group or
others (mode ``0600`` or ``0400``): a key that others can read lets them
forge beats, which keeps a dead host from being fenced (its beats say it
lives).

Key ids. Every datagram names, in its 8-byte key id field, the key it
was signed with, so that a receiver finds the one key to verify it with,
by a dict lookup, before reading anything of the body. A shared key's id
(``kid``) is the first 8 hex digits of the SHA-256 of its secret, sent as
those 8 ASCII characters. A host key's id is 8 bytes of a hash of its
secret with the first byte's high bit set (never ASCII, so never a shared
key's id), shown as 16 hex digits: the engine computes it for every host
Nova lists when it derives their keys (once per host and master, not per
datagram), so a datagram costs one lookup and at most one HMAC whatever
host it claims. 63 bits make two hosts' ids collide with a chance of
about 10^-10 at 20,000 hosts and two masters (:meth:`HostKeyring.learn`
keeps the first and counts the other in ``collisions``). Ids reveal a
hash of the secret, nothing usable to forge.

:class:`Key`'s ``repr`` leaves the secret out, so a key printed into a
log line or a traceback shows its kid only.
"""

import dataclasses
import hashlib
import os
import re
import stat
from typing import Dict, Iterable, Optional, Tuple

from instanceha import errors

MIN_SECRET_BYTES = 32
#: A key file longer than this is not a key file (a wrong path).
MAX_FILE_BYTES = 4096
#: A host key file's line: this prefix, 64 hex digits, ":", the host.
HOST_KEY_PREFIX = b"ihk1:"
#: The label of a host key's derivation, then the host's UTF-8 name.
DERIVE_LABEL = b"instanceha agent host key v1\0"
_ID_LABEL = b"instanceha host key id v1\0"
_HOST_LINE = re.compile(rb"ihk1:([0-9a-f]{64}):(.+)\Z", re.S)
#: The longest host name a key can be bound to (the beat's limit).
MAX_HOST = 255


class KeyFileError(errors.ConfigError):
    """A key file is missing, unreadable, too short or too open; the
    message names the path and the problem (a start-up error)."""


@dataclasses.dataclass(frozen=True, slots=True)
class Key:
    """One secret and its id. ``secret`` is never shown by repr.
    ``host``: the host a host key speaks for (None: a shared or master
    key)."""
    kid: str
    secret: bytes = dataclasses.field(repr=False)
    host: Optional[str] = None
    #: The id as a datagram carries it (8 bytes): a shared key's kid in
    #: ASCII, a host key's 8 bytes.
    wire_id: bytes = dataclasses.field(init=False, repr=False,
                                       compare=False)
    #: SHA-256 after the inner and outer padded keys (RFC 2104), made
    #: at the first :meth:`mac` (20,000 hosts' derived keys are held
    #: without them until their hosts beat).
    _pads: Optional[tuple] = dataclasses.field(
        init=False, repr=False, compare=False, default=None)

    def __post_init__(self):
        object.__setattr__(self, "wire_id", bytes.fromhex(self.kid)
                           if self.host is not None
                           else self.kid.encode("ascii"))

    def _make_pads(self):
        secret = self.secret
        if len(secret) > _BLOCK:
            secret = hashlib.sha256(secret).digest()
        secret = secret.ljust(_BLOCK, b"\0")
        pads = (hashlib.sha256(secret.translate(_INNER)),
                hashlib.sha256(secret.translate(_OUTER)))
        object.__setattr__(self, "_pads", pads)
        return pads

    @classmethod
    def from_secret(cls, secret):
        """The shared (or master) key of ``secret`` (bytes), its kid
        derived from it."""
        return cls(kid=key_id(secret), secret=bytes(secret))

    @classmethod
    def for_host(cls, secret, host):
        """The host key of ``secret`` (the derived bytes) for ``host``."""
        return cls(kid=host_key_id(secret), secret=bytes(secret),
                   host=host)

    def mac(self, data) -> bytes:
        """HMAC-SHA256 of ``data`` with this key: the bytes of
        ``hmac.digest(secret, data, "sha256")``, in half the time (the
        padded key's hash states are made once, not at each datagram:
        at thousands of beats a second that is most of an HMAC's
        cost)."""
        pads = self._pads
        inner, outer = pads if pads is not None else self._make_pads()
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


def host_key_id(secret):
    """A host key's id: 8 bytes of SHA-256(label, secret), the first
    byte's high bit set, as 16 hex digits."""
    digest = bytearray(hashlib.sha256(_ID_LABEL + secret).digest()[:8])
    digest[0] |= 0x80
    return bytes(digest).hex()


def is_host_key_id(wire_id):
    """True when ``wire_id`` (a datagram's 8 bytes) has a host key's
    form."""
    return bool(wire_id) and wire_id[0] >= 0x80


def derive_host_key(master: Key, host: str) -> Key:
    """The key of ``host`` (Nova's name of it) derived from ``master``:
    HMAC-SHA256(master, DERIVE_LABEL + host's UTF-8). Raises ValueError
    for a name no beat can carry."""
    name = host.encode("utf-8") if isinstance(host, str) else b""
    if not name or len(name) > MAX_HOST or not host.isprintable():
        raise ValueError("host key: the host name must be 1 to %d "
                         "printable bytes of UTF-8" % MAX_HOST)
    return Key.for_host(master.mac(DERIVE_LABEL + name), host)


def host_key_line(key: Key) -> str:
    """The one line of ``key``'s host key file (with its newline)."""
    if key.host is None:
        raise ValueError("not a host key")
    return "%s%s:%s\n" % (HOST_KEY_PREFIX.decode("ascii"), key.secret.hex(),
                          key.host)


def _unknown(wire_id):
    """(reason, detail) of a datagram naming no key held."""
    if is_host_key_id(wire_id):
        return ("unknown_key", "host key id %s: of no host this receiver "
                "holds a key for (a host Nova does not list, a key written "
                "for another name, or of another master key)"
                % wire_id.hex())
    return ("unknown_key", "key id %.16r" % wire_id)


class Keyring:
    """The keys a process accepts: ``current`` (used to sign) and, during
    a rotation, ``previous`` (still accepted, never used to sign). Two
    keys with the same kid are one key. An agent's keyring: its host key
    (or the shared key) and, during a rotation or the move from the shared
    key, the previous one."""

    def __init__(self, current: Key, previous: Optional[Key] = None):
        self.current = current
        self.previous = (previous if previous is not None
                         and previous.kid != current.kid else None)
        self._by_kid = {current.kid: current}
        if self.previous is not None:
            self._by_kid[self.previous.kid] = self.previous
        self._by_wire_id = {key.wire_id: key
                            for key in self._by_kid.values()}

    def get(self, kid) -> Optional[Key]:
        """The key named ``kid``, or None when this keyring has none."""
        return self._by_kid.get(kid)

    def by_wire_id(self, wire_id) -> Optional[Key]:
        """The key named ``wire_id``, the key id's bytes as a datagram
        carries them, or None."""
        return self._by_wire_id.get(wire_id)

    def why_unknown(self, wire_id) -> Tuple[str, str]:
        """(drop reason, detail) of a datagram whose key id
        :meth:`by_wire_id` does not know."""
        return _unknown(wire_id)

    @property
    def hosts(self):
        """The hosts this keyring's host keys speak for."""
        return {k.host for k in self._by_kid.values() if k.host is not None}

    @property
    def kids(self):
        """The accepted kids, the current one first."""
        return tuple(self._by_kid)

    def __repr__(self):
        return "Keyring(kids=%r)" % (self.kids,)


def load_key(path, host_key=None) -> Key:
    """The key in the file at ``path``; raises :class:`KeyFileError`.
    ``host_key``: True where only a host key file will do, False where
    only a secret will (a master or shared key), None for either (an
    agent's key)."""
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
    if secret.startswith(HOST_KEY_PREFIX):
        if host_key is False:
            raise KeyFileError(
                "key file %s: a host key (ihk1:...), which speaks for one "
                "host only; this option takes a secret (openssl rand -hex "
                "32)" % path)
        return _host_key(path, secret)
    if host_key:
        raise KeyFileError("key file %s: not a host key (ihk1:...): write "
                           "it with instanceha agent-key HOST" % path)
    if len(secret) < MIN_SECRET_BYTES:
        raise KeyFileError(
            "key file %s: the key is %d bytes, at least %d are needed "
            "(e.g. openssl rand -hex 32)" % (path, len(secret),
                                              MIN_SECRET_BYTES))
    return Key.from_secret(secret)


def _host_key(path, line):
    match = _HOST_LINE.match(line)
    host = None
    if match is not None:
        try:
            host = match.group(2).decode("utf-8")
        except UnicodeDecodeError:
            host = None
    if host is None or not host.isprintable() or \
            len(match.group(2)) > MAX_HOST:
        raise KeyFileError(
            "key file %s: a host key line is ihk1:<64 hex digits>:<host "
            "name>; write it again with instanceha agent-key HOST" % path)
    return Key.for_host(bytes.fromhex(match.group(1).decode("ascii")),
                        host)


def load_keyring(path, previous_path=None) -> Keyring:
    """The keyring of the key file ``path`` (current, signs) and,
    when given, ``previous_path`` (still accepted during a rotation or
    the move from the shared key to the host's own). Raises
    :class:`KeyFileError` naming the file and the problem."""
    current = load_key(path)
    previous = load_key(previous_path) if previous_path else None
    return Keyring(current, previous)


# -- the engine's keys -----------------------------------------------------

#: How a host's last datagram was signed (:meth:`HostKeyring.kind`).
CURRENT, PREVIOUS, SHARED = "current", "previous", "shared"


class HostKeyring:
    """The engine's keys: each host's own key, derived from ``master``
    (and from ``previous_master`` during a rotation: two keys per host),
    and the ``shared`` :class:`Keyring` of older deployments, accepted
    while ``accept_shared`` (the upgrade window). Without a master, the
    shared keyring alone (one key speaks for every host).

    Keys are derived for the hosts :meth:`learn` is given (Nova's), once
    per host and master, and looked up by the datagram's key id: one dict
    lookup, no derivation, per datagram. With the window closed, a
    datagram naming the shared key's id is dropped as ``shared_key`` (no
    HMAC: the id alone says it).

    Thread use: :meth:`learn` replaces the lookup table in one
    assignment; :meth:`by_wire_id` may run meanwhile on another thread
    and sees the old table or the new one."""

    def __init__(self, master: Optional[Key] = None,
                 previous_master: Optional[Key] = None,
                 shared: Optional[Keyring] = None,
                 accept_shared: bool = True):
        if master is None and shared is None:
            raise ValueError("a master key or a shared key is needed")
        if master is None and not accept_shared:
            raise ValueError("no key would be accepted: the shared key is "
                             "refused and there is no master key")
        self.master = master
        self.previous_master = (previous_master if master is not None
                                and previous_master is not None
                                and previous_master.kid != master.kid
                                else None)
        self.shared = shared
        self.accept_shared = bool(accept_shared)
        self._masters = tuple(m for m in (master, self.previous_master)
                              if m is not None)
        self._shared_ids: Dict[bytes, Key] = {}
        self._refused: Dict[bytes, str] = {}
        for key in (shared.current, shared.previous) if shared else ():
            if key is None:
                continue
            if accept_shared:
                self._shared_ids[key.wire_id] = key
            else:
                self._refused[key.wire_id] = key.kid
        self.shared_kids = frozenset(k.kid for k in
                                     self._shared_ids.values())
        self._hosts: Dict[str, Tuple[Key, ...]] = {}
        self._by_wire_id: Dict[bytes, Key] = dict(self._shared_ids)
        self.collisions = 0

    @property
    def per_host(self):
        """True when hosts have keys of their own (a master is set)."""
        return self.master is not None

    @property
    def kids(self):
        """The shared key ids accepted, the current one first."""
        return tuple(k.kid for k in self._shared_ids.values())

    @property
    def master_kids(self):
        """The master keys' ids, the current one first."""
        return tuple(m.kid for m in self._masters)

    def __len__(self):
        return len(self._hosts)

    def __repr__(self):
        return ("HostKeyring(masters=%r, shared=%r, accept_shared=%r, "
                "hosts=%d)" % (self.master_kids, self.kids,
                               self.accept_shared, len(self._hosts)))

    def learn(self, hosts: Iterable[str]) -> int:
        """Hold the keys of exactly ``hosts`` (Nova's names): derive
        those of hosts not held yet, forget the others. Returns how many
        hosts were derived. A name no key can be bound to is skipped."""
        if not self._masters:
            return 0
        names = set(hosts)
        old = self._hosts
        if names == old.keys():
            return 0
        held: Dict[str, Tuple[Key, ...]] = {}
        derived = 0
        for name in names:
            keys_of = old.get(name)
            if keys_of is None:
                try:
                    keys_of = tuple(derive_host_key(m, name)
                                    for m in self._masters)
                except ValueError:
                    continue
                derived += 1
            held[name] = keys_of
        table = dict(self._shared_ids)
        collisions = 0
        for keys_of in held.values():
            for key in keys_of:
                if table.setdefault(key.wire_id, key) is not key:
                    collisions += 1
        self._hosts = held
        self._by_wire_id = table
        self.collisions = collisions
        return derived

    def by_wire_id(self, wire_id) -> Optional[Key]:
        """The key named ``wire_id`` (a datagram's 8 bytes), or None."""
        return self._by_wire_id.get(wire_id)

    def why_unknown(self, wire_id) -> Tuple[str, str]:
        """(drop reason, detail) of a key id :meth:`by_wire_id` does not
        know: ``shared_key`` for the shared key with the window closed."""
        kid = self._refused.get(wire_id)
        if kid is not None:
            return ("shared_key", "names the shared key (id %s), refused "
                    "since [agent] accept_shared_key is false: give the "
                    "host its own key (instanceha agent-key HOST)" % kid)
        return _unknown(wire_id)

    def host_key(self, host, previous=False) -> Key:
        """The key of ``host`` derived from the master (the previous
        master with ``previous``); raises ValueError without one."""
        master = self.previous_master if previous else self.master
        if master is None:
            raise ValueError("no %smaster key" % ("previous " if previous
                                                  else ""))
        held = self._hosts.get(host)
        if held is not None and not previous:
            return held[0]
        return derive_host_key(master, host)

    def kind(self, host, kid) -> Optional[str]:
        """How a datagram of ``host`` signed with ``kid`` was signed:
        CURRENT (the host's key of the current master, or, without a
        master, the current shared key), PREVIOUS (of the previous master,
        or the previous shared key without a master), SHARED (a shared
        key while hosts have their own), or None (a key not held)."""
        if kid in self.shared_kids:
            if self._masters:
                return SHARED
            return CURRENT if kid == self.shared.current.kid else PREVIOUS
        held = self._hosts.get(host)
        if held is not None:
            for i, key in enumerate(held):
                if key.kid == kid:
                    return CURRENT if i == 0 else PREVIOUS
        return None

    def signing_key(self, host, kid=None) -> Key:
        """The key a request to ``host``'s agent is signed with: the key
        its beats were last signed with (``kid``: the agent holds it),
        when this engine still accepts it; else the host's key of the
        current master; else (no master) the current shared key."""
        if kid is not None:
            if kid in self.shared_kids:
                return next(k for k in self._shared_ids.values()
                            if k.kid == kid)
            held = self._hosts.get(host)
            for key in held or ():
                if key.kid == kid:
                    return key
        if self.master is not None:
            return self.host_key(host)
        return self.shared.current


def load_host_keyring(master_path=None, previous_master_path=None,
                      shared_path=None, previous_shared_path=None,
                      accept_shared=True) -> HostKeyring:
    """The engine's :class:`HostKeyring` from its key files (the master
    keys and the shared keys: secrets, never host keys). Raises
    :class:`KeyFileError` naming a file and its problem."""
    master = load_key(master_path, host_key=False) if master_path \
        else None
    previous = load_key(previous_master_path, host_key=False) \
        if previous_master_path else None
    shared = None
    if shared_path:
        shared = Keyring(load_key(shared_path, host_key=False),
                         load_key(previous_shared_path, host_key=False)
                         if previous_shared_path else None)
    try:
        return HostKeyring(master, previous, shared, accept_shared)
    except ValueError as e:
        raise KeyFileError("[agent] keys: %s" % e)
