"""``instanceha status [HOST]``: every host's state, since when and why,
from the service's status file; with HOST, from the journal, what was
decided for each of its servers in its last recovery, and why.

The status file is the engine's last snapshot: it says so when no engine
runs any more or none has rewritten it for a while (``STALE``, first,
and exit status 1), never an engine up and every host active."""

import argparse
import json
import socket
import sys
import time

from instanceha.cmd.common import age, iso, load_conf, reading_journal
from instanceha.cmd.common import config_arguments, split_config_args
from instanceha.util.process import pid_alive, pid_namespace

#: A snapshot not rewritten for this many of its write intervals is
#: stale: its engine is stuck or gone (it rewrites the file every
#: write_interval seconds, a change or not).
STALE_WRITES = 5
#: The write interval of a status file that does not say its own (one
#: of a release before issue 35): instanceha.service.health's
#: STATUS_EVERY plus STATUS_MIN_GAP.
DEFAULT_WRITE_INTERVAL = 2.2


def staleness(data, now, alive=pid_alive, hostname=None, pid_ns=None):
    """None when the snapshot ``data`` is a running engine's and recent;
    else why not, for the STALE line: the engine stopped or its process
    has exited, no rewrite for STALE_WRITES intervals, or the engine
    itself says its view is stale (/healthz's verdict)."""
    written = data.get("written_at", data.get("generated_at"))
    stopped = data.get("stopped_at")
    if stopped is not None:
        return "no engine running: it stopped %s" % _when(stopped, now)
    pid = data.get("pid")
    here = hostname or socket.gethostname()
    # The engine's pid names a process here only on this machine and in
    # this pid namespace (not from the host into a container's).
    same = data.get("hostname") == here and data.get("pid_ns") == (
        pid_ns or pid_namespace())
    if pid and same and not alive(pid):
        return ("no engine running: its process (pid %d) has exited; this "
                "is its last snapshot, written %s" % (
                    pid, iso(written) if written is not None
                    else "at an unknown time"))
    interval = data.get("write_interval") or DEFAULT_WRITE_INTERVAL
    if written is None or now - written > STALE_WRITES * interval:
        return ("snapshot written %s, yet rewritten every %gs by a "
                "running engine: no engine running, or it is stuck"
                % (_when(written, now), interval)
                if written is not None else
                "a snapshot that does not say when it was written")
    live = data.get("live") or {}
    if live.get("ok") is False:
        return live.get("reason") or "the engine says its view is stale"
    return None


def _when(at, now):
    """An ISO date, and how long ago when that is less than a day."""
    if 0 <= now - at < 86400:
        return "%s (%s ago)" % (iso(at), age(now - at))
    return iso(at)


def format_status(data, now=None, stale=None):
    """The status file's ``data`` for the operator; ``stale``: what
    :func:`staleness` says of it, printed first."""
    now = time.time() if now is None else now
    lines = []
    if stale:
        lines.append("STALE: %s" % stale)
    cluster = data.get("cluster", {})
    written = data.get("written_at", data.get("generated_at"))
    # The engine's uptime when it wrote the snapshot: both times are
    # its own clock's (the wall's, or a simulation's).
    ran = age(data.get("generated_at", 0) - data.get("started_at", 0)) \
        if data.get("generated_at") is not None \
        and data.get("started_at") is not None else None
    engine = "engine pid %s on %s" % (data["pid"], data.get("hostname")) \
        if data.get("pid") else "an engine"
    if stale:
        engine += ", which had run %s then" % ran if ran else ""
    else:
        engine += ", up %s" % ran if ran else ""
    lines.append("instanceha status written %s by %s%s%s" % (
        _when(written, now) if written is not None
        else "at an unknown time", engine,
        "; ages as of then" if stale else "",
        "" if cluster.get("ok", True) else "  HOLD: " + cluster["reason"]))
    # The hosts' ages on the engine's clock: now, or when it wrote the
    # snapshot if it is stale (a dead engine's hosts are not "active
    # since 3h" now; nor is one of a simulation's clock in 1970).
    generated = data.get("generated_at")
    if generated is not None:
        now = generated if stale or "written_at" not in data \
            else generated + max(0.0, now - data["written_at"])
    starting = data.get("starting")
    if starting:
        # The start waits for a backend (the journal database, the
        # coordination backend): nothing acts meanwhile.
        lines.append("STARTING: %s" % (starting.get("text") or starting))
    if data.get("coordination"):
        lines.extend(format_coordination(data["coordination"], now))
    rows = [("HOST", "STATE", "SINCE", "REASON")]
    for h in data.get("hosts", []):
        since = h.get("since") or now
        reason = h.get("reason", "")
        if h.get("retrying"):
            reason += " [%s]" % h["retrying"]
        disabled = h.get("operator_disabled")
        if disabled is not None and "disabled by operator" not in reason:
            reason += " [disabled by operator: %s]" % disabled
        agent = h.get("agent")
        if agent and agent != "agent beating" and agent not in reason:
            reason += " [%s]" % agent
        identity = h.get("identity")
        if identity and identity != "verified":
            reason += " [BMC identity %s]" % identity
        fenced = h.get("fenced_by")
        if fenced and fenced.get("proof") == "storage":
            reason += (" [fenced by level %s, storage only: only servers "
                       "on it (%s) are evacuated]" % (
                           fenced.get("level"),
                           ", ".join(fenced.get("protects") or ())))
        elif fenced and fenced.get("how") and fenced["how"] not in reason:
            reason += " [fenced by level %s: %s]" % (fenced.get("level"),
                                                    fenced["how"])
        elif fenced and "fenced by level" not in reason:
            reason += " [fenced by level %s]" % fenced.get("level")
        rows.append((h["name"] or h["id"], h["state"],
                     "%s ago" % age(now - since), reason))
    widths = [max(len(r[i]) for r in rows) for i in range(3)]
    for r in rows:
        lines.append("  ".join(r[i].ljust(widths[i]) for i in range(3))
                     + "  " + r[3])
    for what, why in sorted((data.get("degraded") or {}).items()):
        lines.append("DEGRADED %s: %s" % (what, why))
    unprotected = data.get("unprotected") or {}
    if unprotected:
        lines.append("UNPROTECTED: %d host(s) could not be fenced now:"
                     % len(unprotected))
        for host, why in sorted(unprotected.items()):
            lines.append("  %s: %s" % (host, why))
    lines.extend(_proactive_lines(data.get("proactive")))
    counts = data.get("fencing_identity") or {}
    if counts:
        lines.append("fencing methods by BMC identity: %d verified, %d not "
                     "verified, %d reaching another machine" % (
                         counts.get("verified", 0),
                         counts.get("not_verified", 0),
                         counts.get("mismatch", 0)))
    lines.extend(_failover_line(data.get("failover_capacity")))
    waiting = (data.get("rate_limit") or {}).get("waiting") or []
    if waiting:
        lines.append("fencing rate limit: waiting, in order of detection: "
                     + ", ".join(waiting))
    for name, health in sorted((data.get("sources") or {}).items()):
        lines.append("source %s: %s" % (name, ", ".join(
            "%s=%s" % (k, _value(k, v)) for k, v in sorted(health.items()))))
    return "\n".join(lines)


def _failover_line(view):
    """One line of the failover capacity (``instanceha capacity`` has the
    table): its lowest scope, and every scope below 1."""
    scopes = (view or {}).get("scopes") or []
    if not scopes:
        return []
    low = [s for s in scopes if s["hosts"] < 1 and s["members"]]
    lowest = min(scopes, key=lambda s: (s["hosts"], s["scope"]))
    text = "failover capacity: %s" % lowest["text"]
    if len(low) > 1:
        text += " (%d scopes below 1: %s)" % (
            len(low), ", ".join(s["scope"] for s in low[:10]))
    if view.get("error"):
        text += " [last measure failed: %s]" % view["error"]
    return [text]


def _value(key, value):
    """A source's health value; a time (``*_at``) as an ISO date."""
    if key.endswith("_at") and isinstance(value, (int, float)) \
            and not isinstance(value, bool):
        return iso(value)
    return value


def _proactive_lines(p):
    """Proactive HA: each degraded host's health and what was done."""
    if not p or not p.get("hosts"):
        return []
    lines = ["HARDWARE DEGRADED (proactive HA, drains at %s): %d host(s):"
             % (p.get("severity"), len(p["hosts"]))]
    for host, h in sorted(p["hosts"].items()):
        parts = "; ".join("%s %s" % (c["name"], c["severity"])
                          for c in h.get("components") or ())
        lines.append("  %s: %s (%s): %s" % (host, h.get("severity"),
                                             parts or "-", h.get("action")))
    return lines


def format_coordination(c, now):
    """The group of replicas: who acts for all hosts, and since when."""
    acting = c.get("acting_member")
    since = c.get("acting_since")
    me = c.get("member")
    if c.get("role") == "acting":
        head = "this member ACTS for all hosts"
        if c.get("lease_left") is not None:
            head += " (lease %s s, %.1f s left)" % (c.get("lease"),
                                                   c["lease_left"])
    else:
        head = "this member is %s (%s)" % (
            (c.get("role") or "standby").upper(), c.get("reason") or "")
    lines = ["coordination: group %s at %s; member %s: %s" % (
        c.get("group"), c.get("backend"), me, head)]
    if acting:
        lines.append("acting for all hosts: %s%s" % (
            acting, " since %s ago" % age(now - since) if since else ""))
    else:
        lines.append("acting for all hosts: nobody known yet")
    if c.get("backend_error"):
        lines.append("coordination backend: %s" % c["backend_error"])
    for m in c.get("members") or []:
        role = "acting" if m.get("id") == acting else "standby"
        lines.append("  member %s  host %s  pid %s  %s%s" % (
            m.get("id"), m.get("host"), m.get("pid"), role,
            " since %s ago" % age(now - m["acting_since"])
            if role == "acting" and m.get("acting_since") else ""))
    return lines


def server_decisions(journal, host):
    """The last recovery of ``host`` (a name or service id) from the
    journal: (host record dict or None, [row per server: its latest
    evacuation row since the host was fenced], [reserved host rows])."""
    latest = journal.latest()
    host_id = host if host in latest else next(
        (hid for hid, rec in latest.items() if rec.get("name") == host),
        None)
    if host_id is None:
        return None, [], []
    record = latest[host_id]
    since = record.get("fenced_at")
    last = {}
    for row in journal.evacuations(host_id):
        if since is not None and row["requested_at"] < since:
            continue
        last[row["server_id"]] = row
    rows = sorted(last.values(), key=lambda r: (r["requested_at"], r["id"]))
    reserved = [r for r in journal.reserved_history()
                if r["host_id"] == host_id
                and (since is None or r["taken_at"] >= since
                     or r["returned_at"] is None)]
    return record, rows, reserved


def format_decisions(record, rows, reserved):
    lines = ["host %s: %s: %s" % (record.get("name"), record.get("state"),
                                  record.get("reason", ""))]
    if not rows:
        lines.append("no server decisions in its last recovery")
    else:
        lines.append("servers in its last recovery (%d):" % len(rows))
        table = [("SERVER", "DECISION", "DESTINATION", "WHY")]
        for r in rows:
            table.append((r["server_id"], r["status"], r["dest_host"] or "-",
                          r["detail"] or ""))
        widths = [max(len(t[i]) for t in table) for i in range(3)]
        for t in table:
            lines.append("  " + "  ".join(t[i].ljust(widths[i])
                                          for i in range(3)) + "  " + t[3])
    for r in reserved:
        lines.append("reserved host %s: %s" % (
            r["reserved_host"], r["outcome"] or "in service for it"))
    return "\n".join(lines)


def _status_host(conf, host):
    found, rc = reading_journal(conf,
                                lambda j: server_decisions(j, host))
    if rc:
        return rc
    record, rows, reserved = found
    if record is None:
        # Not a host: a server's instance repair (issue 25).
        from instanceha.cmd import repair
        return repair.status_server(conf, host)
    print(format_decisions(record, rows, reserved))
    work = running_servers(conf.status_file, record)
    if work:
        print(work)
    return 0


def running_servers(path, record):
    """What the status file says the host's running drain or fail-back
    is doing, server by server ('' when nothing runs or no status)."""
    try:
        with open(path) as f:
            hosts = json.load(f).get("hosts") or []
    except (OSError, ValueError):
        return ""
    host = next((h for h in hosts if h.get("id") == record.get("id")
                 or h.get("name") == record.get("name")), None)
    if not host or not host.get("servers"):
        return ""
    lines = ["%s now (%d servers):" % (host.get("work") or "running",
                                       len(host["servers"]))]
    lines += ["  %-40s %s" % kv for kv in sorted(host["servers"].items())]
    return "\n".join(lines)


def parser():
    p = argparse.ArgumentParser(
        prog="instanceha status",
        description="Every host's state, since when and why, from the "
                    "status file the engine rewrites ([DEFAULT] "
                    "status_file): when it was written and by which "
                    "engine. When no engine runs any more, or none has "
                    "rewritten the file for %d of its write intervals, "
                    "or the engine says its view is stale, the first "
                    "line says STALE and the exit status is 1."
                    % STALE_WRITES)
    p.add_argument("host", nargs="?", metavar="HOST",
                   help="a host (its name or service id): its state and, "
                        "from the journal, what was decided for each of "
                        "its servers in its last recovery, and why; or a "
                        "server's id: its instance repair")
    config_arguments(p)
    return p


def main(argv, now=None):
    mine, oslo = split_config_args(argv)
    args, more = parser().parse_known_args(mine)
    conf = load_conf(oslo + more)
    if args.host is not None:
        return _status_host(conf, args.host)
    try:
        with open(conf.status_file) as f:
            data = json.load(f)
    except OSError as e:
        print("instanceha: no status at %s (%s); is the service running?"
              % (conf.status_file, e.strerror), file=sys.stderr)
        return 1
    except ValueError:
        print("instanceha: %s is not a status file" % conf.status_file,
              file=sys.stderr)
        return 1
    now = time.time() if now is None else now
    stale = staleness(data, now)
    print(format_status(data, now, stale))
    return 1 if stale else 0

