"""structlog set-up: key/value lines, stdlib loggers bridged, secrets masked."""

import logging
import re
import sys

import structlog

SECRET_KEYS = re.compile(r"(pass(word)?|secret|token|transport_url|"
                         r"credential|auth)", re.I)
URL_PASSWORD = re.compile(r"(://[^:/@\s]+:)[^@\s]+@")


def _mask(_, __, event_dict):
    for key in list(event_dict):
        if key != "event" and SECRET_KEYS.search(key):
            event_dict[key] = "***"
        elif isinstance(event_dict[key], str):
            event_dict[key] = URL_PASSWORD.sub(r"\1***@", event_dict[key])
    return event_dict


def setup(fmt="console", debug=False, stream=None):
    level = logging.DEBUG if debug else logging.INFO
    renderer = (structlog.processors.JSONRenderer() if fmt == "json"
                else structlog.processors.KeyValueRenderer(
                    key_order=["timestamp", "level", "event", "host",
                               "state"], drop_missing=True))
    shared = [
        structlog.contextvars.merge_contextvars,
        structlog.stdlib.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
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
                           structlog.stdlib.ExtraAdder(), _mask]))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
    # Libraries speak only when it matters.
    for noisy in ("openstack", "keystoneauth", "urllib3", "sushy",
                  "oslo_messaging", "stevedore", "amqp", "kombu"):
        logging.getLogger(noisy).setLevel(logging.DEBUG if debug
                                          else logging.WARNING)
    return handler
