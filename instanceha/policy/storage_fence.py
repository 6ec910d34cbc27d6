"""Which servers a host fenced by storage only may lose, pure.

A fencing level made only of storage fencing (a Ceph blocklist) does not
stop the host: it may still run its servers, but can no longer write to
the fenced storage. Rebuilding a server elsewhere is then safe only when
every disk of it is on that storage; a server with a disk the host keeps
locally would have two writers (or lose what the running copy writes).

``protects`` (the inventory's, for the level that fenced) says what lives
on the fenced storage: ``volumes`` (Cinder volumes) and ``ephemeral``
(Nova's image-backed disks: root, ephemeral and swap, with
``images_type = rbd``). A server is read from Nova's server body
(microversion >= 2.47: the flavor is embedded, with its ephemeral and
swap sizes).
"""

from typing import Any, Mapping, Optional, Sequence

VOLUMES = "volumes"
EPHEMERAL = "ephemeral"


def _size(flavor: Mapping[str, Any], key: str) -> Optional[float]:
    """The flavor's ``key`` size (0 when empty), None when not said."""
    if key not in flavor:
        return None
    value = flavor.get(key)
    if value in ("", None):
        return 0.0
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


def volume_backed(body: Mapping[str, Any]) -> bool:
    """Booted from a volume: Nova shows no image (an empty string)."""
    image = body.get("image")
    if isinstance(image, Mapping):
        return not image.get("id")
    return not image


def why_not_evacuated(body: Mapping[str, Any], protects: Sequence[str]
                      ) -> Optional[str]:
    """None when every disk of the server is on the fenced storage, else
    why the server stays on its host."""
    held = set(protects)
    where = "the fenced storage holds %s" % (
        " and ".join(sorted(held)) or "nothing of it")
    if not volume_backed(body):
        if EPHEMERAL not in held:
            return ("its root disk is local to the host (image-backed) and "
                    "the host is fenced by storage only (%s): it may still "
                    "run" % where)
    elif VOLUMES not in held:
        return ("booted from a volume, but %s: the host is fenced by "
                "storage only and may still run" % where)
    if body.get("os-extended-volumes:volumes_attached") \
            and VOLUMES not in held:
        return ("it has volumes attached and %s: the host is fenced by "
                "storage only and may still run" % where)
    if EPHEMERAL in held:
        return None
    flavor = body.get("flavor")
    if not isinstance(flavor, Mapping):
        return ("its flavor (ephemeral and swap disks) is not known: the "
                "host is fenced by storage only and may still run")
    for key, what in (("ephemeral", "an ephemeral disk"), ("swap", "swap")):
        size = _size(flavor, key)
        if size is None:
            return ("its flavor does not say its %s size: the host is "
                    "fenced by storage only and may still run" % key)
        if size > 0:
            return ("it has %s local to the host (flavor %s %g) and %s: "
                    "the host is fenced by storage only and may still run"
                    % (what, key, size, where))
    return None
