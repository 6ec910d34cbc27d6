"""The one marker (instanceha.util.marker) and the option that no longer
changes it."""

from instanceha.conf import notifications as conf_notifications
from instanceha.util import marker


def test_the_marker_recognises_only_our_reasons():
    assert marker.MARKER == "instanceha:"
    assert marker.is_ours("instanceha: evacuating 2026-11-22T04:31:45Z")
    for other in (None, "", "maintenance", " instanceha: x", 42):
        assert not marker.is_ours(other)


def test_own_reason_prefix_is_deprecated_for_removal():
    opt = {o.name: o for o in conf_notifications.OPTS}["own_reason_prefix"]
    assert opt.deprecated_for_removal
    assert "fixed" in opt.deprecated_reason
