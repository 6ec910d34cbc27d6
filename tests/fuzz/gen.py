"""A fast seeded generator of fuzz inputs, for volume.

Hypothesis strategies find structured cases and shrink them, but cost
milliseconds per example; each Hypothesis example of a target also draws a
``random.Random`` (reproducible from Hypothesis's seed) and runs a batch of
inputs made here, in microseconds each, so the long variant reaches its
100,000 inputs per target in minutes.
"""

import copy

SCALARS = (None, True, False, 0, 1, -1, 2 ** 31, 2 ** 64, 10 ** 400, 0.5,
           -0.0, 1e308, float("inf"), float("-inf"), float("nan"), "", "x",
           "0", "1.1", "true", "null", "\x00", "\ud800", "\u00e9\u2603",
           "2026-11-22T03:58:33Z", "9999-99-99", "a" * 300)


def text(rnd, max_size=20):
    n = rnd.randint(0, max_size)
    pick = rnd.random()
    if pick < 0.5:
        return "".join(chr(rnd.randint(32, 126)) for _ in range(n))
    if pick < 0.8:
        return "".join(chr(rnd.randint(0, 0x2FFF)) for _ in range(n))
    return "".join(chr(rnd.choice((0, 9, 10, 13, 0x7F, 0xFEFF, 0xD800,
                                   0x10FFFF))) for _ in range(n))


def scalar(rnd):
    pick = rnd.random()
    if pick < 0.4:
        return rnd.choice(SCALARS)
    if pick < 0.6:
        return rnd.randint(-2 ** 70, 2 ** 70)
    if pick < 0.7:
        return rnd.uniform(-1e12, 1e12)
    return text(rnd)


def json_like(rnd, keys=(), depth=3):
    """A random JSON-like value; dict keys partly from ``keys``."""
    if depth <= 0 or rnd.random() < 0.35:
        return scalar(rnd)
    if rnd.random() < 0.3:
        return [json_like(rnd, keys, depth - 1)
                for _ in range(rnd.randint(0, 4))]
    out = {}
    for _ in range(rnd.randint(0, 6)):
        key = rnd.choice(keys) if keys and rnd.random() < 0.7 \
            else text(rnd, 8)
        out[key] = json_like(rnd, keys, depth - 1)
    return out


def _containers(value, path=()):
    yield path, value
    if isinstance(value, dict):
        for k, v in value.items():
            if isinstance(v, (dict, list)):
                yield from _containers(v, path + (k,))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            if isinstance(v, (dict, list)):
                yield from _containers(v, path + (i,))


def mutate(rnd, value, keys=(), extra=(), edits=None):
    """A copy of ``value`` with 1-4 random edits of its fields."""
    value = copy.deepcopy(value)
    for _ in range(edits or rnd.randint(1, 4)):
        containers = [c for _, c in _containers(value)
                      if isinstance(c, (dict, list))]
        if not containers:
            return json_like(rnd, keys)
        node = rnd.choice(containers)
        if isinstance(node, dict):
            if not node or rnd.random() < 0.2:
                key = rnd.choice(keys) if keys and rnd.random() < 0.7 \
                    else text(rnd, 8)
                node[key] = _replacement(rnd, None, keys, extra)
                continue
            key = rnd.choice(list(node))
        else:
            if not node:
                node.append(_replacement(rnd, None, keys, extra))
                continue
            key = rnd.randrange(len(node))
        op = rnd.random()
        if op < 0.2:
            del node[key]
        else:
            node[key] = _replacement(rnd, node[key], keys, extra)
    return value


def _replacement(rnd, old, keys, extra):
    pick = rnd.random()
    if old is not None and pick < 0.25:
        return rnd.choice([str(old), [old], {"v": old}, repr(old),
                           old if not isinstance(old, str)
                           else old[:rnd.randint(0, len(old))],
                           old if not isinstance(old, str)
                           else old + text(rnd, 3)])
    if extra and pick < 0.55:
        return copy.deepcopy(rnd.choice(extra))   # never one object twice
    return json_like(rnd, keys, depth=2)


def mutate_bytes(rnd, data, max_size=80):
    """``data`` with a few byte-level edits: flip, set, insert, delete,
    truncate, extend, splice."""
    data = bytearray(data)
    for _ in range(rnd.randint(1, 4)):
        op = rnd.randrange(7)
        if op == 0 and data:
            i = rnd.randrange(len(data))
            data[i] ^= 1 << rnd.randrange(8)
        elif op == 1 and data:
            data[rnd.randrange(len(data))] = rnd.randrange(256)
        elif op == 2:
            data.insert(rnd.randint(0, len(data)), rnd.randrange(256))
        elif op == 3 and data:
            del data[rnd.randrange(len(data))]
        elif op == 4:
            del data[rnd.randint(0, len(data)):]
        elif op == 5:
            data += bytes(rnd.randrange(256)
                          for _ in range(rnd.randint(1, 8)))
        else:
            data = data[4:] + data[:4]
    return bytes(data[:max_size])


def mutate_text(rnd, text_value, alphabet=":-\n #{}[]'\"!&*|>%@`,?\t\\"):
    """``text_value`` with a few character-level edits (for YAML)."""
    chars = list(text_value)
    for _ in range(rnd.randint(1, 5)):
        op = rnd.randrange(4)
        i = rnd.randint(0, len(chars))
        if op == 0:
            chars.insert(i, rnd.choice(alphabet))
        elif op == 1 and chars:
            del chars[min(i, len(chars) - 1)]
        elif op == 2 and chars:
            chars[min(i, len(chars) - 1)] = rnd.choice(alphabet + "ab1")
        else:
            j = rnd.randint(0, len(chars))
            chars[i:i] = chars[j:j + rnd.randint(0, 20)]
    return "".join(chars)
