"""What the agent tells about its host: is nova-compute running, is
libvirt's daemon running, how many guests run, and the machine's system
UUID (``[agent] system_uuid_file``, DMI product_uuid: read once, and again
at most every ``facts_interval`` while it cannot be read).

Cost and blocking. A beat leaves every second; facts must neither delay it
nor cost more than it. So:

* pid file checks (``*_check = pidfile``) are made at every beat: a file
  read and ``kill(pid, 0)``, microseconds;
* systemd and libvirt are asked at most every ``[agent] facts_interval``
  seconds (10 by default): one ``systemctl show`` process for both
  daemons' units (a process start costs milliseconds of CPU: at every
  beat that alone would exceed the agent's budget of 0.5 % of a core),
  and one read-only libvirt connection for the guest count;
* those questions run on a thread of their own: :meth:`FactReader.read`
  returns the latest answers at once, so a hung systemd or libvirtd
  never holds a beat back. Answers older than three refreshes (a query
  that hangs) are sent as unknown.

Unknown is None: no unit loaded, systemctl failing or too slow, libvirt
not importable (python3-libvirt is a system package the agent's Python may
not see) or not answering.
"""

import os
import subprocess
import threading
import time

import structlog

from instanceha.heartbeat import protocol

try:
    import libvirt
except ImportError:       # python3-libvirt not installed or not visible
    libvirt = None

LOG = structlog.get_logger("instanceha.agent.facts")

RUNNING_STATES = ("active", "reloading")


def pid_alive(path):
    """True when the pid file at ``path`` names a live process, False
    when the file is missing or its process is gone, None when it cannot
    be read or holds no pid."""
    try:
        with open(path, "rb") as f:
            pid = int(f.read(64).split()[0])
    except FileNotFoundError:
        return False
    except (OSError, ValueError, IndexError):
        return None
    if pid <= 0:
        return None
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True         # it exists, owned by another user
    except OSError:
        return None
    return True


def parse_show(text, units):
    """{unit: ActiveState} of the units systemd has loaded, from
    ``systemctl show --property=LoadState,ActiveState`` output for
    ``units`` (one block per unit, in their order)."""
    blocks = [b for b in text.strip("\n").split("\n\n")]
    states = {}
    for unit, block in zip(units, blocks):
        fields = dict(line.partition("=")[::2]
                      for line in block.splitlines() if "=" in line)
        if fields.get("LoadState") == "loaded":
            states[unit] = fields.get("ActiveState", "")
    return states


def read_system_uuid(path):
    """(canonical system UUID or None, why not) from the file at
    ``path`` (DMI product_uuid: one line of text)."""
    if not path:
        return None, "[agent] system_uuid_file is empty"
    try:
        with open(path, "rb") as f:
            text = f.read(128).decode("ascii", "replace").strip()
    except OSError as e:
        return None, "%s: %s" % (path, e.strerror or e)
    found = protocol.canonical_uuid(text)
    if found is None:
        return None, "%s: not a system UUID (%r)" % (path, text[:40])
    return found, None


def _spawn(target):
    threading.Thread(target=target, name="agent-facts", daemon=True).start()


def _inline(target):
    target()


class FactReader:
    """Reads the facts of ``conf.agent``; :meth:`read` never blocks on
    systemd or libvirt (see the module's text). Everything that touches
    the host is injectable: ``run`` (subprocess.run's signature),
    ``libvirt_module`` (an object with ``openReadOnly``), ``pid_alive``,
    ``clock`` (monotonic seconds) and ``spawn`` (runs a refresh; a new
    thread by default)."""

    def __init__(self, conf, clock=time.monotonic, run=subprocess.run,
                 libvirt_module=libvirt, pid_alive=pid_alive,
                 spawn=_spawn):
        group = conf.agent
        self._group = group
        self._clock = clock
        self._run = run
        self._libvirt = libvirt_module
        self._pid_alive = pid_alive
        self._spawn = spawn
        register = getattr(libvirt_module, "registerErrorHandler", None)
        if register is not None:
            # libvirt prints each error on stderr unless told otherwise;
            # failures are logged here, once, at debug level.
            register(lambda _ctx, _err: None, None)
        self._interval = group.facts_interval
        self._max_age = 3 * max(group.facts_interval, group.check_timeout)
        self._lock = threading.Lock()
        self._refreshing = False
        self._started_at = None
        # (compute, libvirt, guests, found compute unit), when answered
        self._slow = (None, None, None, None)
        self._slow_at = None
        self._uuid = None
        self._uuid_tried_at = None
        self._uuid_why = None

    @property
    def compute_unit(self):
        """The loaded nova-compute unit systemd named last, else the first
        configured one (None without any)."""
        with self._lock:
            found = self._slow[3]
        units = self._group.compute_units
        return found or (units[0] if units else None)

    def read(self) -> protocol.Facts:
        now = self._clock()
        start = False
        with self._lock:
            if not self._refreshing and self._needs_slow() and (
                    self._started_at is None
                    or now - self._started_at >= self._interval):
                self._refreshing = True
                self._started_at = now
                start = True
        if start:
            self._spawn(self._refresh)
        with self._lock:
            fresh = self._slow_at is not None and \
                now - self._slow_at <= self._max_age
            compute, libvirtd, guests, _ = self._slow if fresh else (
                None, None, None, None)
        group = self._group
        if group.compute_check == "pidfile":
            compute = self._pid_alive(group.compute_pidfile)
        elif group.compute_check == "none":
            compute = None
        if group.libvirt_check == "pidfile":
            libvirtd = self._pid_alive(group.libvirt_pidfile)
        elif group.libvirt_check == "none":
            libvirtd = None
        return protocol.Facts(compute=compute, libvirt=libvirtd,
                              guests=guests,
                              system_uuid=self._system_uuid(now))

    def _system_uuid(self, now):
        """The machine's system UUID: read until found (a file read at
        most every facts_interval), then kept; a failure is logged once
        per distinct reason."""
        if self._uuid is not None:
            return self._uuid
        if self._uuid_tried_at is not None and \
                now - self._uuid_tried_at < max(self._interval, 1.0):
            return None
        self._uuid_tried_at = now
        found, why = read_system_uuid(self._group.system_uuid_file)
        if found is not None:
            self._uuid = found
            LOG.info("agent.system_uuid", system_uuid=found,
                     path=self._group.system_uuid_file)
        elif why != self._uuid_why:
            self._uuid_why = why
            LOG.warning("agent.system_uuid_unknown", reason=why,
                        effect="the engines cannot verify that this "
                               "host's BMCs reach this machine")
        return found

    def _needs_slow(self):
        group = self._group
        return (group.compute_check == "systemd"
                or group.libvirt_check == "systemd"
                or (group.count_guests and self._libvirt is not None))

    def _refresh(self):
        try:
            compute, libvirtd, unit = self._ask_systemd()
            guests = self._count_guests()
            with self._lock:
                self._slow = (compute, libvirtd, guests, unit)
                self._slow_at = self._clock()
        except Exception:   # a thread that dies would stop all refreshes
            LOG.exception("agent.facts_failed")
        finally:
            with self._lock:
                self._refreshing = False

    def _ask_systemd(self):
        group = self._group
        compute_units = list(group.compute_units or []) \
            if group.compute_check == "systemd" else []
        libvirt_units = list(group.libvirt_units or []) \
            if group.libvirt_check == "systemd" else []
        units = compute_units + libvirt_units
        if not units:
            return None, None, None
        try:
            done = self._run(
                ["systemctl", "show", "--property=LoadState,ActiveState",
                 "--"] + units,
                capture_output=True, text=True,
                timeout=group.check_timeout, check=False)
        except (OSError, subprocess.SubprocessError) as e:
            LOG.debug("agent.systemctl_failed", error=str(e))
            return None, None, None
        if done.returncode != 0:
            LOG.debug("agent.systemctl_failed", status=done.returncode,
                      error=(done.stderr or "").strip()[:200])
            return None, None, None
        states = parse_show(done.stdout, units)
        compute_unit = next((u for u in compute_units if u in states), None)
        libvirt_unit = next((u for u in libvirt_units if u in states), None)
        return (self._running(states, compute_unit),
                self._running(states, libvirt_unit), compute_unit)

    @staticmethod
    def _running(states, unit):
        return None if unit is None else states[unit] in RUNNING_STATES

    def _count_guests(self):
        if not self._group.count_guests or self._libvirt is None:
            return None
        try:
            conn = self._libvirt.openReadOnly(self._group.libvirt_uri)
            try:
                return conn.numOfDomains()
            finally:
                conn.close()
        except Exception as e:   # libvirt.libvirtError and its kin
            LOG.debug("agent.libvirt_failed", error=str(e))
            return None


def read_facts(conf, **injected) -> protocol.Facts:
    """One reading of the facts now (systemd and libvirt asked in this
    thread); ``injected`` as for :class:`FactReader`."""
    injected.setdefault("spawn", _inline)
    return FactReader(conf, **injected).read()
