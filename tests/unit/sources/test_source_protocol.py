"""Every source the service starts is a sources.base.Source: start(sink),
stop(), health(); a sink given to start replaces the one it was built
with."""

import inspect

import pytest

from instanceha.sources import base
from instanceha.sources.audit import FencingAudit
from instanceha.sources.control_plane import ControlPlaneMonitor
from instanceha.sources.kdump import KdumpSource
from instanceha.sources.notifications import NotificationSource
from instanceha.sources.reconciler import Reconciler

SOURCES = [Reconciler, ControlPlaneMonitor, FencingAudit, KdumpSource,
           NotificationSource]


@pytest.mark.parametrize("cls", SOURCES, ids=lambda c: c.__name__)
def test_each_source_has_the_protocol_s_methods(cls):
    start = inspect.signature(cls.start).parameters
    assert list(start) == ["self", "sink"] and start["sink"].default is None
    assert list(inspect.signature(cls.stop).parameters) == ["self"]
    assert list(inspect.signature(cls.health).parameters) == ["self"]
    assert issubclass(cls, base.Source)
