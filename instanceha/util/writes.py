"""Which methods of an interface change the world outside this process.

A driver interface (Nova, a BMC), the journal and the sender of requests
to the hosts' agents mark each method that changes something with
:func:`write`. :func:`writes_of` gives the names so marked over a class's
whole MRO. The guard of a coordinated member (instanceha.coordination)
takes its list of calls to check from here, so a write method added to an
interface is guarded as soon as it carries the marker, and a test fails
for a public method that is neither marked nor named as a read.
"""

#: The attribute the marker sets on a function.
ATTRIBUTE = "__instanceha_write__"


def write(fn):
    """Mark ``fn`` (a method) as one that changes the world: Nova,
    Placement, a BMC, an agent or the journal. Returns ``fn`` itself."""
    setattr(fn, ATTRIBUTE, True)
    return fn


def is_write(value) -> bool:
    """True for a function (or a static or class method) marked by
    :func:`write`."""
    value = getattr(value, "__func__", value)
    return bool(getattr(value, ATTRIBUTE, False))


def writes_of(cls) -> frozenset:
    """The names of the methods of ``cls`` marked by :func:`write` in any
    class of its MRO: a subclass overriding a marked method without the
    marker still has it counted as a write."""
    return frozenset(name for klass in getattr(cls, "__mro__", (cls,))
                     for name, value in vars(klass).items()
                     if is_write(value))


def public_methods(cls) -> frozenset:
    """The names of the public callables of ``cls`` over its MRO (not
    ``object``'s): what a test classifies as a read or a write."""
    names = set()
    for klass in getattr(cls, "__mro__", (cls,)):
        if klass is object:
            continue
        for name, value in vars(klass).items():
            if name.startswith("_"):
                continue
            if isinstance(value, property) or callable(
                    getattr(value, "__func__", value)):
                names.add(name)
    return frozenset(names)
