"""Keys and messages shared by the heartbeat and agent tests."""

from instanceha.heartbeat import keys
from instanceha.heartbeat import protocol

SECRET = b"k" * 40
OTHER_SECRET = b"o" * 40
KEY = keys.Key.from_secret(SECRET)
OTHER_KEY = keys.Key.from_secret(OTHER_SECRET)
KEYRING = keys.Keyring(KEY)


def write_key(path, secret=SECRET, mode=0o600):
    path.write_bytes(secret + b"\n")
    path.chmod(mode)
    return path


def beat(**overrides):
    fields = dict(host="compute-1", boot_id="b1", seq=1, sent_at=1000.0,
                  path="mgmt",
                  facts=protocol.Facts(compute=True, libvirt=True,
                                       guests=3))
    fields.update(overrides)
    return protocol.Beat(**fields)


def request(**overrides):
    fields = dict(kind=protocol.RESTART_COMPUTE, host="compute-1", seq=1,
                  sent_at=1000.0, reason="nova-compute down, host alive")
    fields.update(overrides)
    return protocol.Request(**fields)
