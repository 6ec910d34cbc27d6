"""Filling the policies' records from Nova's and Glance's answers; pure."""

from typing import Any, Iterable, Mapping, Optional

from instanceha.policy.facts import (AggregateFacts, FlavorFacts, ImageFacts,
                                     ServerFacts)
from instanceha.util import timeparse

#: Nova's '2026-01-31T04:31:45Z' / naive-UTC timestamps to epoch seconds;
#: None for empty or unreadable. Kept for api/history.py, which reads
#: operator input through it.
parse_nova_time = timeparse.epoch_or_none


def aggregates_of(host, aggregates: Iterable[AggregateFacts]):
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
            extra_specs=dict(flavor.get("extra_specs") or {}))
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
        aggregates=aggregates_of(host, aggregates) if host else ())
