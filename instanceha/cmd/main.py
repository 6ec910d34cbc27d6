"""Console script ``instanceha``.

    instanceha run    [--config-file F]   run the service (SIGHUP: reload
                                          mutable options and the inventory)
    instanceha check  [--config-file F]   check the configuration, the
                                          inventory, Nova, the broker, the
                                          journal and every BMC before
                                          enabling the service
    instanceha status [--config-file F]   print every host's state, since when, why
    instanceha status HOST [--config-file F]
                                          HOST's state and, from the journal,
                                          what was decided for each of its
                                          servers in its last recovery, and why
    instanceha demo   [--hosts N ...]     simulated cloud: kill a host, watch recovery
    instanceha suspend HOST (--seconds N | --forever) [--reason R] [--config-file F]
                                          hands off HOST until N seconds pass
                                          (or until resumed)
    instanceha maintenance HOST [--reason R] [--config-file F]
                                          planned work: heartbeat loss is ignored
    instanceha resume HOST [--reason R] [--config-file F]
                                          watch HOST again (or retry its recovery)
    instanceha resume --storm [--reason R] [--config-file F]
                                          lift the storm hold for the hosts lost now
    instanceha history HOST [--since TIME] [--until TIME] [--limit N] [--json]
                                          HOST's journal: every transition,
                                          action and evacuation, in time order
    instanceha policy explain SERVER [--config-file F]
                                          what the recovery policies decide for
                                          SERVER if its host is lost, and why

suspend, maintenance and resume talk to the service's API through its
unix socket ([api] unix_socket, /run/instanceha/api.sock by default: run
them as the service's user or group); with [api] auth_strategy = keystone
they send a token for the clouds.yaml cloud the service uses ([DEFAULT]
cloud). status and history read the status file and
the journal.
"""

import argparse
import json
import math
import select
import signal
import socket
import sys
import time
import urllib.parse

from instanceha import log
from instanceha import runtime
from instanceha.api import client
from instanceha.cmd import check
from instanceha.cmd import demo
from instanceha.cmd.common import load_conf, reading_journal
from instanceha.cmd.common import split_config_args
from instanceha.drivers.compute import base as compute_base

USAGE = __doc__


def main(argv=None):
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help", "help"):
        print(USAGE.strip())
        return 0
    cmd, rest = argv[0], argv[1:]
    if cmd == "run":
        return run(rest)
    if cmd == "status":
        return status(rest)
    if cmd in ("suspend", "maintenance", "resume"):
        return command(cmd, rest)
    if cmd == "policy":
        return policy(rest)
    if cmd == "demo":
        return demo.main(rest)
    if cmd == "check":
        return check.main(rest)
    if cmd == "history":
        # Local: it reads the journal; at module top SQLAlchemy would cost
        # every CLI command ~0.2 s.
        from instanceha.cmd import history
        return history.main(rest)
    print("instanceha: unknown command %r\n\n%s" % (cmd, USAGE.strip()),
          file=sys.stderr)
    return 2


def policy(argv):
    """``instanceha policy explain SERVER``: reads Nova, changes nothing."""
    if len(argv) < 2 or argv[0] != "explain" or argv[1].startswith("-"):
        print("usage: instanceha policy explain SERVER [--config-file F]",
              file=sys.stderr)
        return 2
    server_id, conf = argv[1], load_conf(argv[2:])
    # Local: openstacksdk and the engine cost ~0.3 s at import; only this
    # command reads Nova.
    from instanceha.drivers.compute.nova import NovaDriver
    from instanceha.engine import selection
    try:
        lines = selection.explain(conf, NovaDriver(conf), server_id,
                                  time.time())
    except compute_base.NotFound:
        print("instanceha: no server %s" % server_id, file=sys.stderr)
        return 1
    except compute_base.ComputeError as e:
        print("instanceha: cannot read Nova: %s" % e, file=sys.stderr)
        return 1
    print("\n".join(lines))
    return 0


#: Signals that stop the service; SIGHUP reloads it.
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


class Signals:
    """SIGTERM and SIGINT (stop) and SIGHUP (reload), for the main loop.

    The kernel may deliver a signal sent to the process to any of its
    threads. CPython's C-level handler then runs in that thread and only
    marks the signal; the Python handler waits until the main thread
    executes Python code again. A main thread blocked on a
    ``threading.Event`` (a lock) is not woken by that, so a SIGHUP could
    wait for the next signal (measured on a busy process: 3 of 200 never
    handled): the cause of the flaky SIGHUP test. The C handler also
    writes the signal number to the wakeup fd (``signal.set_wakeup_fd``)
    in whatever thread it runs: the loop waits on that fd and reads the
    numbers from it, so it wakes at once, no signal is lost, and no
    handler takes a lock. Signals that arrive while a reload runs stay in
    the fd: the loop reloads again after it (the file is read anew).
    Must be made by the main thread.
    """

    def __init__(self):
        self._r, self._w = socket.socketpair()
        self._r.setblocking(False)
        self._w.setblocking(False)
        self._pending = set()
        self._previous = signal.set_wakeup_fd(self._w.fileno(),
                                              warn_on_full_buffer=False)
        # The Python handler does nothing: the C handler's byte in the
        # wakeup fd is the message (and SIGINT raises no KeyboardInterrupt).
        self._handlers = {}
        for sig in STOP_SIGNALS + (signal.SIGHUP,):
            self._handlers[sig] = signal.signal(sig, self._noted)

    @staticmethod
    def _noted(signum, frame):
        pass

    def _read(self, timeout):
        try:
            ready, _, _ = select.select([self._r], [], [], timeout)
        except InterruptedError:       # pragma: no cover - PEP 475 retries
            ready = [self._r]
        while ready:
            try:
                data = self._r.recv(512)
            except (BlockingIOError, InterruptedError):
                break
            if not data:
                break
            self._pending.update(data)

    def wait(self, timeout=None):
        """The signal numbers received since the last call (a set, maybe
        empty after ``timeout`` seconds); blocks until one arrives."""
        if not self._pending:
            self._read(timeout)
        else:
            self._read(0)
        got, self._pending = self._pending, set()
        return got

    def sleep(self, seconds):
        """Sleep up to ``seconds``; True (at once) when a stop signal came.
        Other signals are kept for :meth:`wait`."""
        deadline = time.monotonic() + max(0.0, seconds)
        while True:
            if self._pending.intersection(STOP_SIGNALS):
                return True
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            self._read(left)

    def close(self):
        """Put back the handlers and wakeup fd found at construction."""
        for sig, handler in self._handlers.items():
            if handler is not None:
                signal.signal(sig, handler)
        signal.set_wakeup_fd(self._previous)
        self._r.close()
        self._w.close()


def serve(svc, signals):
    """The main loop of a started service: reload on SIGHUP, stop on
    SIGTERM or SIGINT (after the reload running, if any)."""
    while True:
        got = signals.wait()
        if got.intersection(STOP_SIGNALS):
            break
        if signal.SIGHUP in got:
            svc.reload()
    svc.stop()


def run(argv):
    # Local: only ``run`` needs the service; at module top its openstacksdk,
    # oslo.messaging and SQLAlchemy would cost every CLI command ~0.4 s.
    from instanceha import service as service_mod
    conf = load_conf(argv)
    log.setup(conf.log_format, conf.debug)
    # Before anything starts a thread: a signal sent meanwhile is kept.
    signals = Signals()
    try:
        return _run(conf, signals, service_mod, compute_base.ComputeError)
    finally:
        signals.close()


def _run(conf, signals, service_mod, ComputeError):
    try:
        svc = service_mod.Service(conf, sleep=signals.sleep)
    except (service_mod.ConfigError, ComputeError) as e:
        print("instanceha: cannot start: %s" % e, file=sys.stderr)
        return 2
    try:
        svc.start()
    except service_mod.StartupError as e:
        # Nothing was acted on and what was bound is closed again.
        print("instanceha: cannot start: %s" % e, file=sys.stderr)
        return 2
    except service_mod.StartInterrupted as e:
        # SIGTERM while a backend was awaited: nothing was acted on.
        print("instanceha: stopped before the start finished: %s" % e,
              file=sys.stderr)
        return 0
    runtime.freeze_startup_heap()
    serve(svc, signals)
    return 0


def _api_url(conf):
    """The running service's API: its unix socket, else TCP."""
    return client.api_url(conf)


def positive_seconds(text):
    """argparse type for --seconds: a positive, finite number."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError("%r is not a number of seconds"
                                         % text)
    if not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError(
            "must be a positive, finite number of seconds, not %r (for a "
            "suspension without end give --forever)" % text)
    return value


def command_parser(verb):
    p = argparse.ArgumentParser(prog="instanceha %s" % verb)
    p.add_argument("host", nargs="?" if verb == "resume" else None)
    p.add_argument("--reason", default="")
    if verb == "resume":
        p.add_argument("--storm", action="store_true",
                       help="lift the storm hold for the hosts lost now "
                            "(more losses hold again), instead of "
                            "resuming one host")
    if verb == "suspend":
        how_long = p.add_mutually_exclusive_group()
        how_long.add_argument("--seconds", type=positive_seconds,
                              default=None,
                              help="the suspension ends by itself after "
                                   "this long (at most [api] "
                                   "max_suspend_seconds)")
        how_long.add_argument("--forever", action="store_true",
                              help="the suspension lasts until 'instanceha "
                                   "resume HOST'")
    return p


def command(verb, argv):
    p = command_parser(verb)
    argv, rest = split_config_args(argv)
    args, more = p.parse_known_args(argv)
    rest += more
    if verb == "suspend" and args.seconds is None and not args.forever:
        p.error("say how long: give --seconds N or --forever")
    storm = verb == "resume" and args.storm
    if verb == "resume" and bool(args.host) == storm:
        p.error("give a HOST to resume, or --storm (not both)")
    conf = load_conf(rest)
    body = {"reason": args.reason or "by %s" % verb}
    if verb == "suspend":
        if args.forever:
            body["forever"] = True
        elif args.seconds > conf.api.max_suspend_seconds:
            p.error("--seconds: at most %g ([api] max_suspend_seconds); for "
                    "a suspension without end give --forever"
                    % conf.api.max_suspend_seconds)
        else:
            body["seconds"] = args.seconds
    path = "/storm/resume" if storm else "/hosts/%s/%s" % (
        urllib.parse.quote(args.host, safe=""), verb)
    try:
        code, answer = client.call(conf, "POST", path, body)
    except client.ClientError as e:
        print("instanceha: %s" % e, file=sys.stderr)
        return 1
    if code != 202:
        print("instanceha: %s refused (%d): %s" % (
            verb, code, client.error_text(answer)), file=sys.stderr)
        return 1
    if storm:
        print("storm hold lifted for %s; more losses hold again" % ", ".join(
            "%s (%d hosts lost)" % kv for kv in sorted(
                answer["lifted"].items())))
        return 0
    print(format_answer(verb, answer))
    return 0


def format_answer(verb, answer, now=None):
    """The service's 202 answer to a host command, for the operator."""
    now = time.time() if now is None else now
    text = "%s: %s requested (was %s)" % (answer["host"], verb,
                                          answer["state"])
    if verb == "suspend":
        until = answer.get("until")
        if until is None:
            text += "; until 'instanceha resume %s'" % answer["host"]
        else:
            text += "; until %s (in %s)" % (
                time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(until)),
                _age(until - now))
    running = answer.get("still_running")
    if running:
        text += "\nstill running for %s: %s" % (answer["host"], running)
    return text


def _age(seconds):
    seconds = int(max(seconds, 0))
    if seconds < 120:
        return "%ds" % seconds
    if seconds < 7200:
        return "%dm" % (seconds // 60)
    return "%dh%02dm" % (seconds // 3600, seconds % 3600 // 60)


def format_status(data, now=None):
    now = time.time() if now is None else now
    lines = []
    cluster = data.get("cluster", {})
    lines.append("instanceha status at %s (engine up %s)%s" % (
        time.strftime("%Y-%m-%dT%H:%M:%SZ",
                      time.gmtime(data.get("generated_at", now))),
        _age(now - data.get("started_at", now)),
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
        rows.append((h["name"] or h["id"], h["state"],
                     "%s ago" % _age(now - since), reason))
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
            acting, " since %s ago" % _age(now - since) if since else ""))
    else:
        lines.append("acting for all hosts: nobody known yet")
    if c.get("backend_error"):
        lines.append("coordination backend: %s" % c["backend_error"])
    for m in c.get("members") or []:
        role = "acting" if m.get("id") == acting else "standby"
        lines.append("  member %s  host %s  pid %s  %s%s" % (
            m.get("id"), m.get("host"), m.get("pid"), role,
            " since %s ago" % _age(now - m["acting_since"])
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
        print("instanceha: no host %r in the journal" % host,
              file=sys.stderr)
        return 1
    print(format_decisions(record, rows, reserved))
    return 0


def status(argv):
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


if __name__ == "__main__":
    sys.exit(main())
