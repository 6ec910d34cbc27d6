"""The ceph_blocklist method's inventory fields, checked when the inventory
is read (no librados here: :mod:`ceph_blocklist` imports it).

Fields (besides ``driver: ceph_blocklist``):

``addresses``
    the host's Ceph client addresses (required, a non-empty list): an IP
    (``10.0.0.5``, ``fd00::5``: every client of that address, as Ceph reads
    an entry with port 0 and nonce 0) or one client instance
    (``10.0.0.5:0/3571``, ``[fd00::5]:6800/12``).
``protects``
    what of the host's servers lives on this Ceph (required, a non-empty
    list): ``volumes`` (Cinder volumes: a server booted from a volume, with
    no local ephemeral or swap disk) and/or ``ephemeral`` (the host's Nova
    keeps image-backed disks in RBD: ``images_type = rbd`` in the libvirt
    section of its nova.conf). A level made only of storage fencing
    evacuates only the servers this says are on the Ceph; the others stay
    on the host.
``ceph_conf``
    a ceph.conf for this host's cluster (default: ``[ceph_fencing]
    conf_file``), for a cloud with several clusters.
"""

import ipaddress
import re

from instanceha.drivers.fencing.inventory_entry import InventoryError

FIELDS = {"addresses", "protects", "ceph_conf"}
VOLUMES = "volumes"
EPHEMERAL = "ephemeral"
PROTECTS = (VOLUMES, EPHEMERAL)

_INSTANCE = re.compile(r"^(\[[^\]]+\]|[^:/\[\]]+):(\d+)/(\d+)$")


def normalize(text):
    """The address as Ceph lists it in ``osd blocklist ls``
    (``10.0.0.5:0/0``, ``[fd00::5]:0/0``). Raises ValueError."""
    text = str(text).strip()
    try:
        ip = ipaddress.ip_address(text)
        port, nonce = 0, 0
    except ValueError:
        found = _INSTANCE.match(text)
        if not found:
            raise ValueError("%r is not an IP address or an "
                             "IP:port/nonce client address" % text)
        ip = ipaddress.ip_address(found.group(1).strip("[]"))
        port, nonce = int(found.group(2)), int(found.group(3))
        if port > 65535:
            raise ValueError("%r: port %d is above 65535" % (text, port))
    host = "[%s]" % ip if ip.version == 6 else str(ip)
    return "%s:%d/%d" % (host, port, nonce)


def addresses(options):
    """The normalized addresses of a checked method's options."""
    return tuple(normalize(a) for a in options.get("addresses") or ())


def protects(options):
    return tuple(str(p) for p in options.get("protects") or ())


def check(where, options):
    """Raise InventoryError naming the field and the fix."""
    listed = options.get("addresses")
    if not listed:
        raise InventoryError(
            "%s: field addresses is missing: list the host's Ceph client "
            "addresses, e.g. addresses: [10.0.0.5]" % where)
    if isinstance(listed, str) or not isinstance(listed, (list, tuple)):
        raise InventoryError(
            "%s: field addresses must be a list, e.g. addresses: "
            "[10.0.0.5]" % where)
    for a in listed:
        try:
            normalize(a)
        except ValueError as e:
            raise InventoryError("%s: field addresses: %s; write an IP "
                                 "(10.0.0.5) or IP:port/nonce" % (where, e))
    said = options.get("protects")
    if not said:
        raise InventoryError(
            "%s: field protects is missing: say what of the host's servers "
            "is on this Ceph: [volumes] (Cinder volumes), [ephemeral] "
            "(Nova's images_type = rbd) or both; servers with disks "
            "elsewhere are not evacuated on this level alone" % where)
    if isinstance(said, str) or not isinstance(said, (list, tuple)):
        raise InventoryError("%s: field protects must be a list, e.g. "
                             "protects: [volumes]" % where)
    bad = [p for p in said if p not in PROTECTS]
    if bad:
        raise InventoryError("%s: field protects: %r is not one of %s"
                             % (where, bad[0], ", ".join(PROTECTS)))
    conf = options.get("ceph_conf")
    if conf is not None and (not isinstance(conf, str) or not conf):
        raise InventoryError("%s: field ceph_conf must be a ceph.conf path"
                             % where)
