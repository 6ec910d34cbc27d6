"""A private D-Bus bus (dbus-daemon) with a fake systemd-logind on it,
for the agent's shutdown drain (issue 38) where logind does not run or
must not be touched (a test never shuts its machine down).

The fake owns ``org.freedesktop.login1`` and answers what the agent
calls: ``Manager.Inhibit`` (a pipe's write end as the lock; the lock is
released when every copy of it is closed, which the read end shows as
EOF) and the ``InhibitDelayMaxUSec`` property; :meth:`FakeLogind.prepare`
emits ``PrepareForShutdown``.
"""

import os
import select
import shutil
import subprocess
import threading

from jeepney import DBusAddress, HeaderFields, MessageType, new_error, \
    new_method_return, new_signal
from jeepney.bus_messages import message_bus
from jeepney.io.blocking import open_dbus_connection

LOGIN1 = "org.freedesktop.login1"
PATH = "/org/freedesktop/login1"
MANAGER = "org.freedesktop.login1.Manager"


def dbus_daemon():
    """The dbus-daemon binary, or None."""
    return shutil.which("dbus-daemon")


class PrivateBus:
    """A dbus-daemon of its own (session configuration) on a socket in
    ``workdir``; ``address`` is what clients connect to."""

    def __init__(self, workdir):
        self.path = os.path.join(str(workdir), "bus")
        self.address = "unix:path=" + self.path
        self.proc = subprocess.Popen(
            [dbus_daemon(), "--session", "--nofork", "--nopidfile",
             "--address=" + self.address, "--print-address=1"],
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        # It prints its address once it listens.
        ready, _, _ = select.select([self.proc.stdout], [], [], 30)
        if not ready or not self.proc.stdout.readline():
            self.close()
            raise RuntimeError("dbus-daemon did not start")

    def close(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        self.proc.stdout.close()


class FakeLogind:
    """See the module's text. ``delay_max``: InhibitDelayMaxSec."""

    def __init__(self, address, delay_max=60.0):
        self.delay_max = delay_max
        self.conn = open_dbus_connection(bus=address, enable_fds=True)
        reply = self.conn.send_and_get_reply(
            message_bus.RequestName(LOGIN1), timeout=10)
        if reply.body[0] != 1:
            raise RuntimeError("cannot own %s" % LOGIN1)
        self.lock = threading.Lock()
        #: (what, who, why, mode, read end) of each lock handed out
        self.locks = []
        self._stop = threading.Event()
        self._send = threading.Lock()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self):
        while not self._stop.is_set():
            try:
                msg = self.conn.receive(timeout=0.2)
            except TimeoutError:
                continue
            except (OSError, ValueError):
                return
            if msg.header.message_type != MessageType.method_call:
                continue
            member = msg.header.fields.get(HeaderFields.member)
            if member == "Inhibit":
                read_end, write_end = os.pipe()
                with self.lock:
                    self.locks.append(tuple(msg.body) + (read_end,))
                with self._send:
                    self.conn.send(new_method_return(msg, "h",
                                                     (write_end,)))
                os.close(write_end)
            elif member == "Get" and msg.body[1] == "InhibitDelayMaxUSec":
                with self._send:
                    self.conn.send(new_method_return(
                        msg, "v", (("t", int(self.delay_max * 1e6)),)))
            else:
                with self._send:
                    self.conn.send(new_error(
                        msg, "org.freedesktop.DBus.Error.UnknownMethod"))

    def prepare(self, start=True):
        """Emit PrepareForShutdown(start), as logind does when a shutdown
        or reboot begins (or is cancelled)."""
        signal = new_signal(DBusAddress(PATH, interface=MANAGER),
                            "PrepareForShutdown", "b", (start,))
        with self._send:
            self.conn.send(signal)

    def held(self, index=-1):
        """Whether lock ``index`` is still held (its write end open
        somewhere)."""
        with self.lock:
            read_end = self.locks[index][4]
        ready, _, _ = select.select([read_end], [], [], 0)
        return not ready     # EOF once every copy is closed

    def close(self):
        self._stop.set()
        self._thread.join(5)
        self.conn.close()
        for entry in self.locks:
            os.close(entry[4])
