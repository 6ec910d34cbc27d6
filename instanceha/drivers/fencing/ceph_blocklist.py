"""Storage fencing through Ceph: blocklist the host's client addresses.

``ceph osd blocklist add <addr>`` (sent through librados as a monitor
command) makes every OSD refuse that client: a host that may still run can
no longer write to its RBD disks, so a server whose disks are all on this
Ceph may be rebuilt elsewhere without two writers. The method
(:class:`CephBlocklistDriver`, ``proves`` STORAGE) adds an entry per
address, then confirms each by ``osd blocklist ls``; :meth:`still_fenced`
reads the list again before an evacuation sends anything; :meth:`unfence`
removes the entries once the host is back and its service cleaned up (the
engine calls it before it puts the service back), and confirms they are
gone.

Inventory fields: :mod:`instanceha.drivers.fencing.ceph_options`;
cluster, user and timeouts: ``[ceph_fencing]``.

librados is Debian's python3-rados. It is imported as ``rados`` when the
service's Python has it; otherwise that one module is loaded from
``[ceph_fencing] rados_path`` (nothing else of that directory comes
along), so a virtualenv needs no system site-packages.

Addresses come from the inventory; :attr:`CephBlocklistDriver.reported`
is the hook for addresses the host's agent reports (a callable host ->
addresses; none by default).
"""

import glob
import importlib
import importlib.machinery
import importlib.util
import json
import math
import os
import threading

import structlog

from instanceha.drivers.fencing import base, ceph_options

LOG = structlog.get_logger("instanceha.fencing.ceph")

_MODULE = "rados"


def load_rados(path):
    """The ``rados`` module: the Python's own, else the one file of it in
    ``path``. Raises FenceError saying what to install."""
    try:
        return importlib.import_module(_MODULE)
    except ImportError:
        pass
    found = sorted(glob.glob(os.path.join(path or "", "rados.cpython-*.so")))
    if not found:
        raise base.FenceError(
            "ceph_blocklist: librados' Python module is missing: install "
            "the package python3-rados (or set [ceph_fencing] rados_path "
            "to the directory holding rados.cpython-*.so; looked in %s)"
            % (path or "no directory"))
    try:
        loader = importlib.machinery.ExtensionFileLoader(_MODULE, found[-1])
        spec = importlib.util.spec_from_file_location(_MODULE, found[-1],
                                                      loader=loader)
        module = importlib.util.module_from_spec(spec)
        loader.exec_module(module)
    except ImportError as e:
        raise base.FenceError(
            "ceph_blocklist: %s does not load in this Python (%s): use "
            "the Python python3-rados was built for" % (found[-1], e))
    return module


def listed(outbuf):
    """The addresses an ``osd blocklist ls`` answer (JSON) lists. Ceph
    16 appends the range blocklist as a second JSON value."""
    text = outbuf.decode() if isinstance(outbuf, bytes) else str(outbuf)
    text = text.strip()
    if not text:
        return set()
    value, _ = json.JSONDecoder().raw_decode(text)
    if isinstance(value, dict):
        value = value.get("blocklist") or value.get("entries") or []
    out = set()
    for item in value:
        addr = item.get("addr") if isinstance(item, dict) else item
        if addr:
            try:
                out.add(ceph_options.normalize(addr))
            except ValueError:
                out.add(str(addr))
    return out


class CephBlocklistDriver(base.FencingDriver):
    name = "ceph_blocklist"
    proves = base.STORAGE

    def __init__(self, conf, rados=None, reported=None):
        self._conf = conf.ceph_fencing
        self._rados = rados
        self._clients = {}
        self._lock = threading.Lock()
        #: host -> addresses its agent reported (the hook; none by default)
        self.reported = reported or (lambda host: ())

    # -- the cluster -----------------------------------------------------

    def _conf_file(self, bmc):
        return (bmc.options or {}).get("ceph_conf") or self._conf.conf_file

    def _client(self, path):
        with self._lock:
            client = self._clients.get(path)
            if client is not None:
                return client
            if self._rados is None:
                self._rados = load_rados(self._conf.rados_path)
            rados = self._rados
            timeout = str(int(math.ceil(self._conf.timeout)))
            settings = {"client_mount_timeout": timeout,
                        "rados_mon_op_timeout": timeout}
            if self._conf.keyring:
                settings["keyring"] = self._conf.keyring
            try:
                client = rados.Rados(conffile=path,
                                     name=self._conf.client_name,
                                     conf=settings)
            except Exception as e:   # noqa: BLE001 - rados.Error and kin
                raise base.FenceError(
                    "ceph_blocklist: cannot use %s as user %s: %s (check "
                    "[ceph_fencing] conf_file, client_name and keyring)"
                    % (path, self._conf.client_name, _why(e)))
            try:
                client.connect(timeout=int(timeout))
            except Exception as e:   # noqa: BLE001 - rados.Error and kin
                try:
                    client.shutdown()
                except Exception:   # noqa: BLE001, S110 - discarded
                    pass
                raise base.BmcUnreachable(
                    "ceph_blocklist: cannot connect to the monitors of %s "
                    "as %s: %s" % (path, self._conf.client_name,
                                   _why(e)))
            self._clients[path] = client
            return client

    def _drop(self, path):
        with self._lock:
            client = self._clients.pop(path, None)
        if client is not None:
            try:
                client.shutdown()
            except Exception:   # noqa: BLE001, S110 - discarded anyway
                pass

    def _command(self, bmc, cmd):
        path = self._conf_file(bmc)
        client = self._client(path)
        try:
            ret, outbuf, outs = client.mon_command(
                json.dumps(cmd), b"",
                timeout=int(math.ceil(self._conf.timeout)))
        except Exception as e:   # noqa: BLE001 - rados.Error and kin
            self._drop(path)
            raise base.BmcUnreachable(
                "host %s: ceph_blocklist: monitor command %s on %s got no "
                "answer: %s" % (bmc.host, cmd["prefix"], path, _why(e)))
        if ret != 0:
            raise base.FenceError(
                "host %s: ceph_blocklist: monitor refused %s: %s (%d)"
                % (bmc.host, _op(cmd), outs or "no reason given", ret))
        return outbuf

    def addresses(self, bmc):
        """The host's client addresses, normalized: the inventory's, then
        those its agent reported."""
        out = list(ceph_options.addresses(bmc.options or {}))
        for addr in self.reported(bmc.host) or ():
            try:
                norm = ceph_options.normalize(addr)
            except ValueError as e:
                LOG.warning("ceph_address_ignored", host=bmc.host,
                            reason=str(e))
                continue
            if norm not in out:
                out.append(norm)
        if not out:
            raise base.FenceError("host %s: ceph_blocklist: no client "
                                  "address to blocklist" % bmc.host)
        return out

    def blocklist(self, bmc):
        """The addresses the cluster blocklists now (a read)."""
        return listed(self._command(bmc, {"prefix": "osd blocklist ls",
                                          "format": "json"}))

    # -- the driver interface ----------------------------------------------

    @base.write
    def fence(self, bmc):
        addrs = self.addresses(bmc)
        for addr in addrs:
            self._command(bmc, {"prefix": "osd blocklist",
                                "blocklistop": "add", "addr": addr,
                                "expire": float(self._conf.blocklist_expire)})
        missing = [a for a in addrs if a not in self.blocklist(bmc)]
        if missing:
            raise base.FenceError(
                "host %s: ceph_blocklist: %s not listed by osd blocklist ls "
                "after it was added" % (bmc.host, ", ".join(missing)))
        LOG.warning("ceph_blocklisted", host=bmc.host, addresses=addrs,
                    reason="storage fencing: the host's Ceph clients can no "
                           "longer write; confirmed by osd blocklist ls")

    def still_fenced(self, bmc):
        missing = [a for a in self.addresses(bmc)
                   if a not in self.blocklist(bmc)]
        if missing:
            return ("ceph_blocklist: %s no longer blocklisted (expired, or "
                    "removed by hand)" % ", ".join(missing))
        return None

    @base.write
    def unfence(self, bmc):
        addrs = self.addresses(bmc)
        present = self.blocklist(bmc)
        for addr in addrs:
            if addr in present:
                self._command(bmc, {"prefix": "osd blocklist",
                                    "blocklistop": "rm", "addr": addr})
        left = [a for a in addrs if a in self.blocklist(bmc)]
        if left:
            raise base.FenceError(
                "host %s: ceph_blocklist: %s still listed after its removal"
                % (bmc.host, ", ".join(left)))

    def ready(self, bmc):
        """None when the host has client addresses to blocklist and the
        monitors answer ``osd blocklist ls`` (a read); else raises
        FenceError saying why."""
        self.addresses(bmc)
        self.blocklist(bmc)
        return None

    @base.write
    def power_off(self, bmc):
        raise base.FenceError("host %s: ceph_blocklist powers nothing off "
                              "(it fences storage)" % bmc.host)

    def power_state(self, bmc):
        return base.PowerState.UNKNOWN

    def close(self):
        with self._lock:
            paths = list(self._clients)
        for path in paths:
            self._drop(path)


def _why(e):
    return str(e) or type(e).__name__


def _op(cmd):
    return " ".join(str(x) for x in (cmd["prefix"], cmd.get("blocklistop"),
                                     cmd.get("addr")) if x)
