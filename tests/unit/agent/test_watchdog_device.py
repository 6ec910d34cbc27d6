"""The agent's watchdog device (agent.watchdog.Device) on a test device."""

from instanceha.agent import watchdog


def test_the_device_reads_armed_only_once_it_was_fed(tmp_path, monkeypatch):
    """A beat sent by another thread reports the watchdog armed as soon as
    ``armed`` is true: that must never be before the device was first
    fed (a crash in between would leave an armed chip never fed; and the
    report would claim what the hardware has not seen). Seen between
    the open and the first feed: the 'armed' log line, written there."""
    path = tmp_path / "wd-test-device"
    path.write_bytes(b"")
    dev = watchdog.Device(str(path), 5, environ={})
    seen = []

    def note(event, **kw):
        seen.append((event, dev.armed, path.read_bytes()))

    monkeypatch.setattr(watchdog.LOG, "info", note)
    real_write = watchdog.os.write

    def write(fd, data):
        # Another thread looks right before each write reaches the chip.
        seen.append(("write", dev.armed, path.read_bytes()))
        return real_write(fd, data)

    monkeypatch.setattr(watchdog.os, "write", write)
    dev.arm()
    assert dev.armed and path.read_bytes() == watchdog.FEED
    armed_unfed = [s for s in seen if s[1] and not s[2]]
    assert not armed_unfed, seen
    assert seen, "nothing observed"
