"""JSON in and out of :meth:`instanceha.api.server.OperatorAPI.handle`: a
request body's object, how long a suspension lasts, and an answer."""

import json
import math


def _no_constant(name):
    raise ValueError("%s is not a number" % name)


def load_object(body):
    """A request body's JSON object; ValueError saying what is wrong."""
    try:
        args = json.loads(body or b"{}", parse_constant=_no_constant)
    except RecursionError:
        raise ValueError("nested too deeply") from None
    if not isinstance(args, dict):
        raise ValueError("body must be a JSON object")
    return args


def suspend_seconds(args, verb, maximum):
    """How long a command's body asks to suspend: seconds (a positive,
    finite number up to ``maximum``) or None for ``"forever": true``. A
    suspension without end is never implied: one of the two is required,
    and not both. Raises ValueError saying what is wrong."""
    seconds = args.get("seconds")
    forever = args.get("forever", False)
    if verb != "suspend":
        if seconds is not None or forever:
            raise ValueError("seconds and forever apply to suspend only")
        return None
    if not isinstance(forever, bool):
        raise ValueError("forever must be true or false")
    if seconds is not None and forever:
        raise ValueError("give either seconds or forever, not both")
    if seconds is None:
        if forever:
            return None
        raise ValueError("say how long: give \"seconds\": N (at most %g) "
                         "or \"forever\": true" % maximum)
    if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) \
            or seconds <= 0 or (isinstance(seconds, float)
                                and not math.isfinite(seconds)):
        # (an int is finite, and may be too large for math.isfinite)
        raise ValueError("seconds must be a positive, finite number, not %s"
                         % json.dumps(seconds)[:40])
    if seconds > maximum:
        raise ValueError("seconds must be at most %g ([api] "
                         "max_suspend_seconds); for a suspension without "
                         "end give \"forever\": true" % maximum)
    return float(seconds)


def answer(status, data):
    """(status, content type, bytes) of a JSON answer."""
    return status, "application/json", json.dumps(data, default=str).encode()
