"""structlog set-up: key/value lines, stdlib loggers bridged, secrets masked."""

import logging
import re
import sys

from oslo_utils import strutils
import structlog

#: Field names whose value is a secret, at the top of a log line or in a
#: dict inside it. Ours, not mask_dict_password's list: that list knows
#: neither ``transport_url`` nor ``credential`` nor ``auth``
#: (tests/unit/test_log_masking.py shows it).
SECRET_KEYS = re.compile(r"(pass(word)?|secret|token|transport_url|"
                         r"credential|auth)", re.I)
MASK = "***"

# Inside a text, oslo.utils' strutils.mask_password masks ``password=x``,
# ``'password': 'x'``, ``"Password": "x"``, ``--password x`` and the like
# for the names it knows (password, token, secret, ...). The patterns below
# cover only what it misses; tests/unit/test_log_masking.py
# (test_mask_password_misses_what_our_patterns_cover) shows each miss.

#: ``scheme://user:password@host``: the password (up to the last ``@``
#: before the host; a password with ``@`` in it is masked whole).
#: mask_password leaves URLs alone.
URL_PASSWORD = re.compile(r"(://[^:/@\s'\"]*:)[^\s'\"]*@")
#: HTTP headers that carry credentials, as ``Name: value``, ``'Name':
#: 'value'`` (a dict's repr) or ``Name=value``; a scheme word (Basic,
#: Bearer) is kept, what follows it masked. mask_password knows no header
#: names (``Authorization: Bearer x``, ``Cookie: x``).
SECRET_HEADER = re.compile(
    r"((?:authorization|proxy-authorization|x-auth-token|x-subject-token|"
    r"x-storage-token|x-service-token|cookie|set-cookie)['\"]?\s*[:=]\s*"
    r"['\"]?(?:(?:basic|bearer|digest|negotiate|token)\s+)?)"
    r"[^'\"\s,;}\]]+", re.I)
#: Fields mask_password misses: the names it does not know (``passwd=x``,
#: ``db_pass=x``, ``api_key=x``, ``credentials: x``) in any form, and the
#: names it knows with the value after a colon unquoted (``password: x``)
#: or as bytes (``b'password': b'x'``, a request body's repr).
#: The name is a whole token, not the end of a file's name: it starts
#: after no letter, digit or ``_``, nor after a path's ``.``, ``/`` or
#: ``\\`` (in ``compute-0.pass: No such file or directory``, ``pass`` names
#: a file, and what follows the colon is the error).
SECRET_FIELD = re.compile(
    r"((?<![\w./\\])(?:"
    r"(?:[a-z_]*pass(?:wd)?|api_key|credentials?)['\"]?\s*[:=]\s*"
    r"(?:b?['\"])?"
    r"|(?:[a-z_]*password|[a-z_]*token|secret)['\"]?\s*"
    r"(?::\s*b?['\"]?|=\s*b['\"])))"
    r"(?!\*\*\*)[^'\"\s,;}&)\]]+", re.I)
#: Command lines: ``ipmitool -P secret``, ``sshpass -p secret``... as
#: short flags (``-P``, ``-k``; ``-p`` is a port for ipmitool: not masked)
#: and long flags whose name ends like a secret's (``--passwd``,
#: ``--os-password``, ``--db-pass``, ``--os-token``, ``--api-key``; of
#: these mask_password knows only ``--password``). A flag that names where
#: a secret is (``--password-file``) is not one.
SECRET_FLAG = re.compile(
    r"((?:^|\s)(?:-P|-k|(?i:--(?:[a-z0-9]+[-_])*(?:pass|passwd|password|"
    r"token|secret|api[-_]key|credentials?)))(?:=|\s+))(?!\*\*\*)\S+")


def mask_url(text):
    """``text`` (a URL, an error quoting one) with the URL's password
    masked; None reads as an empty text."""
    return URL_PASSWORD.sub(r"\1" + MASK + "@", "" if text is None
                            else str(text))


def mask_text(text):
    """``text`` with every credential masked: mask_password's, then the
    patterns above. (mask_password also blanks the last quoted value after
    a secret in a dict's repr: ``{'password': 'x', 'host': 'h'}`` becomes
    ``{'password': '***', 'host': '}``.)"""
    if not text:
        return text
    text = strutils.mask_password(text, secret=MASK)
    text = URL_PASSWORD.sub(r"\1" + MASK + "@", text)
    text = SECRET_HEADER.sub(r"\1" + MASK, text)
    text = SECRET_FIELD.sub(r"\1" + MASK, text)
    return SECRET_FLAG.sub(r"\1" + MASK, text)


def mask_known(text, secrets):
    """``text`` with each of ``secrets`` (values known to be secret: a
    BMC's password, its URL-quoted form, a bearer token) masked where it
    stands as a whole token. An edge of a secret that is a letter, a digit
    or ``_`` must not touch another one: with the password ``x``, ``Max
    retries exceeded`` stays as it is (masking the ``x`` in each word would
    show which letters the password holds), while ``-P x``, ``'x'``,
    ``user:x@host`` are masked. Longer secrets are masked first (a password
    inside its basic-auth form)."""
    if not text:
        return text
    found = sorted({str(s) for s in secrets if s}, key=len, reverse=True)
    if not found:
        return text
    pattern = "|".join(
        "%s%s%s" % (r"(?<!\w)" if re.match(r"\w", s) else "", re.escape(s),
                    r"(?!\w)" if re.match(r"\w", s[-1]) else "")
        for s in found)
    return re.sub(pattern, MASK, str(text))


def _mask_value(value, depth=0):
    if isinstance(value, str):
        return mask_text(value)
    if isinstance(value, (bool, int, float)) or value is None:
        return value
    if isinstance(value, BaseException):
        return mask_text("%s: %s" % (type(value).__name__, value))
    if depth < 3 and isinstance(value, (list, tuple)):
        return type(value)(_mask_value(v, depth + 1) for v in value) \
            if type(value) in (list, tuple) else value
    if depth < 3 and isinstance(value, dict):
        return {k: (MASK if isinstance(k, str) and SECRET_KEYS.search(k)
                    else _mask_value(v, depth + 1))
                for k, v in value.items()}
    return value


def _mask(_, __, event_dict):
    """Mask secrets: the value of any field whose name says it holds one,
    and credentials inside every text (the event, reasons, exception texts
    and rendered tracebacks). Runs after ``format_exc_info``."""
    for key in list(event_dict):
        if key.startswith("_"):
            continue          # structlog's own (the stdlib record)
        if key != "event" and key != "exception" and SECRET_KEYS.search(key):
            event_dict[key] = MASK
        else:
            event_dict[key] = _mask_value(event_dict[key])
    return event_dict


def setup(fmt="console", debug=False, stream=None, level=None):
    """``level``: the least level logged (default INFO, DEBUG with
    ``debug``)."""
    if level is None:
        level = logging.DEBUG if debug else logging.INFO
    renderer = (structlog.processors.JSONRenderer() if fmt == "json"
                else structlog.processors.KeyValueRenderer(
                    key_order=["timestamp", "level", "event", "host",
                               "state"], drop_missing=True))
    shared = [
        structlog.contextvars.merge_contextvars,
        structlog.stdlib.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
        # The traceback becomes text here, so that it is masked too.
        structlog.processors.format_exc_info,
        _mask,
    ]
    structlog.configure(
        processors=shared + [structlog.stdlib.ProcessorFormatter.wrap_for_formatter],
        logger_factory=structlog.stdlib.LoggerFactory(),
        wrapper_class=structlog.stdlib.BoundLogger,
        cache_logger_on_first_use=False,
    )
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.setFormatter(structlog.stdlib.ProcessorFormatter(
        processor=renderer,
        foreign_pre_chain=[structlog.stdlib.add_log_level,
                           structlog.processors.TimeStamper(fmt="iso",
                                                            utc=True),
                           structlog.stdlib.ExtraAdder(),
                           structlog.processors.format_exc_info, _mask]))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
    # Libraries speak only when it matters.
    for noisy in ("openstack", "keystoneauth", "urllib3", "sushy",
                  "oslo_messaging", "stevedore", "amqp", "kombu"):
        logging.getLogger(noisy).setLevel(logging.DEBUG if debug
                                          else logging.WARNING)
    return handler
