"""A stand-in for python3-libvirt's module in the guest-event tests: the
lifecycle constants (libvirt's own numbers), a read-only connection that
records its registrations, and an event loop that never runs."""

VIR_DOMAIN_EVENT_ID_LIFECYCLE = 0
VIR_DOMAIN_EVENT_STARTED = 2
VIR_DOMAIN_EVENT_SUSPENDED = 3
VIR_DOMAIN_EVENT_RESUMED = 4
VIR_DOMAIN_EVENT_STOPPED = 5
VIR_DOMAIN_EVENT_CRASHED = 8
VIR_DOMAIN_EVENT_SUSPENDED_PAUSED = 0
VIR_DOMAIN_EVENT_SUSPENDED_IOERROR = 2
VIR_DOMAIN_EVENT_SUSPENDED_WATCHDOG = 3
VIR_DOMAIN_EVENT_STOPPED_SHUTDOWN = 0
VIR_DOMAIN_EVENT_STOPPED_DESTROYED = 1
VIR_DOMAIN_EVENT_STOPPED_CRASHED = 2
VIR_DOMAIN_EVENT_STOPPED_FAILED = 5
VIR_DOMAIN_EVENT_CRASHED_PANICKED = 0
VIR_DOMAIN_EVENT_CRASHED_CRASHLOADED = 1


class Dom:
    def __init__(self, uuid):
        self.uuid = uuid

    def UUIDString(self):
        return self.uuid


class Conn:
    def __init__(self, uri):
        self.uri = uri
        self.alive = True
        self.callbacks = []

    def isAlive(self):
        return self.alive

    def domainEventRegisterAny(self, dom, event_id, callback, opaque):
        self.callbacks.append((event_id, callback))
        return len(self.callbacks)


class Module:
    """The module: ``fail`` makes openReadOnly raise it."""

    def __init__(self):
        for name, value in globals().items():
            if name.startswith("VIR_"):
                setattr(self, name, value)
        self.opened = []
        self.loop_registered = 0
        self.fail = None

    def virEventRegisterDefaultImpl(self):
        self.loop_registered += 1

    def virEventRunDefaultImpl(self):
        raise AssertionError("the event loop is not run in unit tests")

    def openReadOnly(self, uri):
        if self.fail is not None:
            raise self.fail
        conn = Conn(uri)
        self.opened.append(conn)
        return conn
