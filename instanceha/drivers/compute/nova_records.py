"""Nova's answers (bodies as Nova gives them) to instanceha's records.

Pure translation: a service, server, migration or aggregate body to the
:mod:`instanceha.drivers.compute.base` record, Nova's timestamps to epoch
seconds. A missing key raises KeyError / TypeError: the driver turns it
into a ComputeError naming the call.
"""

from instanceha.drivers.compute import base
from instanceha.util import timeparse


def parse_time(value):
    """Nova's naive-UTC timestamps ('2026-11-22T04:31:45.000000') to epoch
    seconds; None for none."""
    if not value:
        return None
    try:
        return timeparse.epoch(value)
    except ValueError:
        raise base.ComputeError(
            "unparseable timestamp from Nova: %r" % (value,)) from None


def to_aggregate(a):
    return base.Aggregate(name=str(a["name"]),
                          hosts=tuple(a.get("hosts") or ()),
                          zone=a.get("availability_zone"),
                          metadata=dict(a.get("metadata") or {}),
                          id=str(a["id"]) if a.get("id") is not None
                          else None)


def to_service(s, parse=parse_time):
    """``parse``: parse_time, or a memo of it over a whole answer (rows
    share their updated_at strings: Nova stamps whole seconds)."""
    return _service(
        str(s["id"]), s["host"], s["state"], s["status"],
        bool(s.get("forced_down")), s.get("disabled_reason"),
        parse(s.get("updated_at")), s.get("zone"),
        s.get("binary") or "nova-compute")


_service = base.ComputeService


def time_memo():
    """parse_time with a memo, for one answer's rows."""
    seen = {}

    def parse(value):
        try:
            return seen[value]
        except KeyError:
            seen[value] = parsed = parse_time(value)
            return parsed
        except TypeError:               # unhashable: parse_time says why
            return parse_time(value)
    return parse


def to_server(s):
    fault = s.get("fault") or {}
    return base.Server(
        id=s["id"], name=s.get("name", ""), status=s.get("status", ""),
        host=s.get("OS-EXT-SRV-ATTR:host"),
        task_state=s.get("OS-EXT-STS:task_state"),
        vm_state=s.get("OS-EXT-STS:vm_state"),
        fault=fault.get("message"),
        power_state=s.get("OS-EXT-STS:power_state"), raw=s)


def to_migration(m):
    return base.Migration(
        id=str(m.get("uuid") or m["id"]), server_id=m["instance_uuid"],
        source_host=m.get("source_compute"), dest_host=m.get("dest_compute"),
        status=m["status"], migration_type=m.get("migration_type", ""),
        created_at=parse_time(m.get("created_at")),
        updated_at=parse_time(m.get("updated_at")))


def _int_or_none(value):
    return None if value is None else int(value)


def to_server_migration(m, server_id):
    """A row of GET /servers/{id}/migrations (an in-progress live
    migration)."""
    return base.ServerMigration(
        id=str(m["id"]), server_id=m.get("server_uuid") or server_id,
        status=m["status"], source_host=m.get("source_compute"),
        dest_host=m.get("dest_compute"),
        memory_total=_int_or_none(m.get("memory_total_bytes")),
        memory_remaining=_int_or_none(m.get("memory_remaining_bytes")),
        disk_total=_int_or_none(m.get("disk_total_bytes")),
        disk_remaining=_int_or_none(m.get("disk_remaining_bytes")),
        updated_at=parse_time(m.get("updated_at")), uuid=m.get("uuid"))
