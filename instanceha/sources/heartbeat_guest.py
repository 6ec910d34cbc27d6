"""The agents' guest events (issue 25) in the heartbeat source: a
verified :class:`~instanceha.heartbeat.guest.GuestEvent` is accepted as a
beat is (a host Nova knows, the replay guard, on a sequence of its own:
:data:`~instanceha.heartbeat.guest.REPLAY_PATH`), then handed to the
source's ``guest_sink`` (instance repair's ``from_agent``), which judges
it against Nova's view before anything is done. Drops are counted and
logged by the source, with its reasons."""

import structlog

from instanceha.heartbeat import guest

LOG = structlog.get_logger("instanceha.sources.heartbeat")


def accept(src, items, now, drops):
    """``items``: [(GuestEvent, sender)] of one batch of ``src`` (a
    HeartbeatSource), received at ``now``; a refusal is appended to
    ``drops`` as (reason, sender, detail)."""
    if src._guest_sink is None:
        for _, sender in items:
            drops.append(("no_guest_sink", sender, "a guest event, and "
                          "instance repair is off"))
        return []
    with src._emit:
        accepted, unknown = _check(src, items, now, drops)
        if unknown and src._refresh_due(now):
            src.refresh(now)
            more, unknown = _check(src, unknown, now, drops)
            accepted += more
        for message, sender in unknown:
            src._unknown_host(message.host, sender)
        for message, sender in accepted:
            LOG.info("agent_guest_event", host=message.host,
                     server=message.server, lifecycle=message.event,
                     detail=message.detail, address=sender[0],
                     reason="the host's agent saw the guest break by "
                            "itself: handed to instance repair")
            try:
                src._guest_sink(message, now)
            except Exception as e:   # noqa: BLE001 - lives on
                src._error("agent_guest_event_failed", e)
    return [m for m, _ in accepted]


def _check(src, items, now, drops):
    """Under the source's lock: (accepted, of unknown hosts)."""
    accepted, unknown = [], []
    with src._lock:
        ids = src._ids
        for item in items:
            message, sender = item
            if message.host not in ids:
                unknown.append(item)
                continue
            why = src._guard.check(message.host, guest.REPLAY_PATH,
                                   message.boot_id, message.seq,
                                   message.sent_at, now)
            if why is not None:
                drops.append((why, sender, "host %s guest event of %s"
                              % (message.host, message.server)))
                continue
            accepted.append(item)
        src._received += len(accepted)
        src._accepted += len(accepted)
    return accepted, unknown
