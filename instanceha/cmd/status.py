"""``instanceha status [HOST]``: every host's state, since when and why,
from the service's status file; with HOST, from the journal, what was
decided for each of its servers in its last recovery, and why."""

import json
import sys
import time

from instanceha.cmd.common import age, load_conf, reading_journal


def format_status(data, now=None):
    now = time.time() if now is None else now
    lines = []
    cluster = data.get("cluster", {})
    lines.append("instanceha status at %s (engine up %s)%s" % (
        time.strftime("%Y-%m-%dT%H:%M:%SZ",
                      time.gmtime(data.get("generated_at", now))),
        age(now - data.get("started_at", now)),
        "" if cluster.get("ok", True) else "  HOLD: " + cluster["reason"]))
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
    counts = data.get("fencing_identity") or {}
    if counts:
        lines.append("fencing methods by BMC identity: %d verified, %d not "
                     "verified, %d reaching another machine" % (
                         counts.get("verified", 0),
                         counts.get("not_verified", 0),
                         counts.get("mismatch", 0)))
    waiting = (data.get("rate_limit") or {}).get("waiting") or []
    if waiting:
        lines.append("fencing rate limit: waiting, in order of detection: "
                     + ", ".join(waiting))
    for name, health in sorted((data.get("sources") or {}).items()):
        lines.append("source %s: %s" % (name, ", ".join(
            "%s=%s" % kv for kv in sorted(health.items()))))
    return "\n".join(lines)


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


def main(argv):
    host = None
    if argv and not argv[0].startswith("-"):
        host, argv = argv[0], argv[1:]
    conf = load_conf(argv)
    if host is not None:
        return _status_host(conf, host)
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
    print(format_status(data))
    return 0

