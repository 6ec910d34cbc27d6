"""The agent's guest-event watcher (issue 25): libvirt lifecycle events of
guests that broke by themselves, sent to the engines as signed
:class:`~instanceha.heartbeat.guest.GuestEvent` datagrams.

On when ``[agent] guest_events`` is true and python3-libvirt is
importable by the agent. It opens a read-only connection to
``[agent] libvirt_uri``, registers for domain LIFECYCLE events and runs
libvirt's default event loop on a daemon thread. Sent (the guest broke by
itself): STOPPED with detail FAILED or CRASHED, CRASHED with any detail,
SUSPENDED with detail WATCHDOG or IOERROR. Not sent: anything else, in
particular a normal shutdown (STOPPED/SHUTDOWN) and a destroy
(STOPPED/DESTROYED: Nova's own stop, a user's, ends in one), a start or a
resume. The watcher only reports: the engine judges each event against
Nova's view of the server before anything is done.

Each event is one datagram to every engine over the first network path
(UDP: a lost one is made up for by Nova's notifications and the sweep).
A connection that closes (libvirtd restarted) is opened again by
:meth:`GuestWatcher.check`, run every ``RECONNECT`` seconds.
"""

import threading
import time

import structlog

from instanceha.agent import facts as facts_mod
from instanceha.heartbeat import guest

LOG = structlog.get_logger("instanceha.agent.guest_events")

#: seconds between checks of the libvirt connection
RECONNECT = 10.0
#: (libvirt event constant, {detail constant: detail name} or None for
#: any detail, the event's name)
_WATCHED = (
    ("VIR_DOMAIN_EVENT_STOPPED",
     {"VIR_DOMAIN_EVENT_STOPPED_FAILED": "failed",
      "VIR_DOMAIN_EVENT_STOPPED_CRASHED": "crashed"}, guest.STOPPED),
    ("VIR_DOMAIN_EVENT_CRASHED",
     {"VIR_DOMAIN_EVENT_CRASHED_PANICKED": "panicked",
      "VIR_DOMAIN_EVENT_CRASHED_CRASHLOADED": "crashloaded"}, guest.CRASHED),
    ("VIR_DOMAIN_EVENT_SUSPENDED",
     {"VIR_DOMAIN_EVENT_SUSPENDED_WATCHDOG": "watchdog",
      "VIR_DOMAIN_EVENT_SUSPENDED_IOERROR": "ioerror"}, guest.SUSPENDED),
)


def event_table(libvirt_module):
    """{event number: (event name, {detail number: detail name}, any
    detail)} from the module's constants, by name (a constant the
    module lacks is left out)."""
    table = {}
    for event_const, details, name in _WATCHED:
        number = getattr(libvirt_module, event_const, None)
        if number is None:
            continue
        known = {getattr(libvirt_module, c): d for c, d in details.items()
                 if getattr(libvirt_module, c, None) is not None}
        table[number] = (name, known, name == guest.CRASHED)
    return table


def _spawn(target, name):
    threading.Thread(target=target, name=name, daemon=True).start()


class GuestWatcher:
    """See the module's text. ``send(data)`` hands one datagram to the
    engines (:meth:`instanceha.agent.sender.Sender.send_event`);
    ``sent_at()`` is the sender's step-free clock; ``seq_start`` the
    first sequence number (milliseconds since boot by default);
    ``libvirt_module`` and ``spawn(target, name)`` are injectable."""

    def __init__(self, conf, keyring, host, boot_id, send, sent_at,
                 libvirt_module=facts_mod.libvirt, seq_start=None,
                 spawn=_spawn):
        self._uri = conf.agent.libvirt_uri
        self._keyring = keyring
        self.host = host
        self.boot_id = boot_id
        self._send = send
        self._sent_at = sent_at
        self._libvirt = libvirt_module
        self._spawn = spawn
        self._table = event_table(libvirt_module) \
            if libvirt_module is not None else {}
        self._seq = (int(time.clock_gettime(time.CLOCK_BOOTTIME) * 1000)
                     if seq_start is None else seq_start)
        self._lock = threading.Lock()
        self._conn = None
        self.sent = 0
        self.ignored = 0

    @property
    def available(self):
        return self._libvirt is not None

    def start(self, stop_event):
        """Start the event loop and the connection check (daemon
        threads); False when libvirt is not importable."""
        if self._libvirt is None:
            LOG.info("agent.guest_events_off",
                     reason="python3-libvirt is not importable by the "
                            "agent: no guest events are sent")
            return False
        self._libvirt.virEventRegisterDefaultImpl()
        self._spawn(self._loop, "agent-libvirt-events")
        self.check()

        def checks():
            while not stop_event.wait(RECONNECT):
                self.check()
        self._spawn(checks, "agent-libvirt-check")
        return True

    def _loop(self):
        while True:
            try:
                self._libvirt.virEventRunDefaultImpl()
            except Exception as e:    # a failing loop must not end
                LOG.warning("agent.libvirt_event_loop_failed",
                            error=str(e))
                time.sleep(1.0)

    def check(self):
        """Open the connection and register for lifecycle events when
        there is none or it closed; True when registered."""
        conn = self._conn
        try:
            if conn is not None and conn.isAlive():
                return True
        except Exception:         # a dead connection may raise
            pass
        libvirt = self._libvirt
        try:
            conn = libvirt.openReadOnly(self._uri)
            conn.domainEventRegisterAny(
                None, libvirt.VIR_DOMAIN_EVENT_ID_LIFECYCLE,
                self.on_lifecycle, None)
        except Exception as e:    # libvirt.libvirtError and its kin
            if self._conn is not None or conn is None:
                LOG.warning("agent.guest_events_unavailable",
                            uri=self._uri, error=str(e),
                            reason="cannot watch libvirt's lifecycle "
                                   "events; tried again every %.0f s"
                                   % RECONNECT)
            self._conn = None
            return False
        self._conn = conn
        LOG.info("agent.guest_events_watching", uri=self._uri,
                 reason="sending guests' crash, failure and watchdog/I/O "
                        "error pause events to the engines")
        return True

    def on_lifecycle(self, conn, dom, event, detail, opaque):
        """libvirt's lifecycle callback (on the event loop's thread):
        send the event when it means the guest broke by itself."""
        try:
            self._on_lifecycle(dom, event, detail)
        except Exception:         # never into libvirt's C code
            LOG.exception("agent.guest_event_failed")

    def _on_lifecycle(self, dom, event, detail):
        entry = self._table.get(event)
        name = detail_name = None
        if entry is not None:
            name, details, any_detail = entry
            detail_name = details.get(detail) or (
                "unknown" if any_detail else None)
        if detail_name is None:
            with self._lock:
                self.ignored += 1
            LOG.debug("agent.guest_event_ignored", lifecycle=event,
                      detail=detail, reason="not a guest that broke by "
                                            "itself")
            return
        server = dom.UUIDString()
        with self._lock:
            self._seq += 1
            seq = self._seq
        ev = guest.GuestEvent(host=self.host, boot_id=self.boot_id,
                              server=server, event=name,
                              detail=detail_name, seq=seq,
                              sent_at=self._sent_at())
        data = guest.encode(ev, self._keyring.current)
        count = self._send(data)
        with self._lock:
            self.sent += 1
        LOG.info("agent.guest_event_sent", server=server, lifecycle=name,
                 detail=detail_name, seq=seq, datagrams=count,
                 reason="the guest broke by itself (libvirt lifecycle "
                        "event)")
