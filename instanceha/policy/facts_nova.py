"""Filling the policies' records from Nova's and Glance's answers; pure."""

from typing import Any, Dict, Iterable, List, Mapping, Optional, Tuple

from instanceha.policy.facts import (AggregateFacts, CapacityRecord,
                                     FlavorFacts, HostFacts, ImageFacts,
                                     ServerFacts, ServiceRecord)
from instanceha.util import timeparse

#: Nova's '2026-01-31T04:31:45Z' / naive-UTC timestamps to epoch seconds;
#: None for empty or unreadable. Kept for api/history.py, which reads
#: operator input through it.
parse_nova_time = timeparse.epoch_or_none


def aggregates_of(host: str, aggregates: Iterable[AggregateFacts]
                  ) -> Tuple[AggregateFacts, ...]:
    """The aggregates that list ``host``, sorted by name."""
    return tuple(sorted((a for a in aggregates if host in a.hosts),
                        key=lambda a: (a.name, a.id)))


def image_from_glance(body: Mapping[str, Any]) -> ImageFacts:
    """Glance v2 lists custom properties as top-level fields of the
    image: every field except ``tags`` is kept as a property."""
    props = {k: v for k, v in body.items() if k != "tags"}
    return ImageFacts(id=str(body.get("id") or ""),
                      name=str(body.get("name") or ""), properties=props,
                      tags=tuple(body.get("tags") or ()))


def aggregate_from_nova(body: Mapping[str, Any]) -> AggregateFacts:
    """One entry of os-aggregates."""
    return AggregateFacts(name=str(body.get("name") or ""),
                          id=str(body.get("uuid") or body.get("id") or ""),
                          metadata=dict(body.get("metadata") or {}),
                          hosts=tuple(body.get("hosts") or ()))


def server_from_nova(body: Mapping[str, Any],
                     image: Optional[ImageFacts] = None,
                     aggregates: Iterable[AggregateFacts] = ()
                     ) -> ServerFacts:
    """A server of GET /servers/detail (microversion >= 2.47 for the
    embedded flavor with extra specs, >= 2.26 for tags). ``image``: the
    Glance image (or the boot volume's image metadata) if the caller read
    it; ``aggregates``: every aggregate, filtered here to the host's."""
    host = body.get("OS-EXT-SRV-ATTR:host")
    flavor = body.get("flavor")
    flavor_facts = None
    if isinstance(flavor, Mapping):
        flavor_facts = FlavorFacts(
            id=str(flavor.get("id") or ""),
            name=str(flavor.get("original_name") or flavor.get("name") or ""),
            extra_specs=dict(flavor.get("extra_specs") or {}),
            vcpus=flavor.get("vcpus"), ram_mb=flavor.get("ram"),
            disk_gb=flavor.get("disk"), ephemeral_gb=flavor.get("ephemeral"),
            swap_mb=flavor.get("swap"))
    if image is None:
        ref = body.get("image")
        if isinstance(ref, Mapping) and ref.get("id"):
            image = ImageFacts(id=str(ref["id"]))
    return ServerFacts(
        id=str(body["id"]), name=str(body.get("name") or ""), host=host,
        metadata=dict(body.get("metadata") or {}),
        tags=tuple(body.get("tags") or ()),
        created_at=parse_nova_time(body.get("created")),
        image=image, flavor=flavor_facts,
        aggregates=aggregates_of(host, aggregates) if host else (),
        status=_text_or_none(body.get("status")),
        vm_state=_text_or_none(body.get("OS-EXT-STS:vm_state")),
        task_state=_text_or_none(body.get("OS-EXT-STS:task_state")),
        zone=server_zone(body))


def _text_or_none(value: object) -> Optional[str]:
    return value if isinstance(value, str) and value else None


def server_zone(body: Mapping[str, Any]) -> Optional[str]:
    """The availability zone a server must stay in: from compute
    microversion 2.96, ``pinned_availability_zone`` (None: not pinned, it
    may go anywhere); before, the zone it is in
    (``OS-EXT-AZ:availability_zone``), which may be stricter than Nova."""
    if "pinned_availability_zone" in body:
        return _text_or_none(body.get("pinned_availability_zone"))
    return _text_or_none(body.get("OS-EXT-AZ:availability_zone"))


def _aggregate_facts(agg: object) -> AggregateFacts:
    if isinstance(agg, AggregateFacts):
        return agg
    return AggregateFacts(name=str(getattr(agg, "name", "") or ""),
                          id=str(getattr(agg, "id", "") or ""),
                          metadata=dict(getattr(agg, "metadata", None) or {}),
                          hosts=tuple(getattr(agg, "hosts", None) or ()))


def host_facts(capacities: Optional[Mapping[str, CapacityRecord]],
               services: Optional[Iterable[ServiceRecord]],
               aggregates: Iterable[object] = ()) -> Dict[str, HostFacts]:
    """{host: HostFacts} for every host with a ``nova-compute`` service in
    ``services`` (ComputeService: other binaries ignored), sorted by host.
    A host with several records is enabled and up only if each says so,
    forced down if any does; its zone is the one they agree on (None
    otherwise). ``capacities``: {host: HostCapacity} (a host missing
    there has capacity None); ``aggregates``: [Aggregate] or
    [AggregateFacts]."""
    aggs = [_aggregate_facts(a) for a in aggregates or ()]
    records: Dict[str, List[ServiceRecord]] = {}
    for svc in services or ():
        if getattr(svc, "binary", "nova-compute") == "nova-compute":
            records.setdefault(svc.host, []).append(svc)
    out = {}
    for host in sorted(records):
        recs = records[host]
        zones = {getattr(s, "zone", None) for s in recs}
        out[host] = HostFacts(
            host=host,
            zone=(next(iter(zones)) or None) if len(zones) == 1 else None,
            aggregates=aggregates_of(host, aggs),
            enabled=all(s.status == "enabled" for s in recs),
            up=all(s.state == "up" for s in recs),
            forced_down=any(bool(s.forced_down) for s in recs),
            capacity=(capacities or {}).get(host))
    return out


#: a driver Server's attributes -> the key of Nova's answer they come from
_SERVER_FIELDS = (("id", "id"), ("name", "name"), ("status", "status"),
                  ("host", "OS-EXT-SRV-ATTR:host"),
                  ("task_state", "OS-EXT-STS:task_state"),
                  ("vm_state", "OS-EXT-STS:vm_state"))


def project_of(server: object) -> Optional[str]:
    """A driver's Server's project (Nova's ``tenant_id``), None when its
    answer does not say."""
    return (getattr(server, "raw", None) or {}).get("tenant_id") or None


def server_from_record(server: object, image: Optional[ImageFacts] = None,
                       aggregates: Iterable[AggregateFacts] = ()
                       ) -> ServerFacts:
    """:func:`server_from_nova` for a driver's Server (its ``raw``, Nova's
    answer, completed with its attributes where ``raw`` lacks them: a
    fake or simulated driver may keep no ``raw``). A ServerFacts is
    returned as it is."""
    if isinstance(server, ServerFacts):
        return server
    body = dict(getattr(server, "raw", None) or {})
    for attr, key in _SERVER_FIELDS:
        if key not in body and getattr(server, attr, None) is not None:
            body[key] = getattr(server, attr)
    return server_from_nova(body, image=image, aggregates=aggregates)