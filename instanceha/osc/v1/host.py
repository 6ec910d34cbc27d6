"""``openstack instanceha host ...``: every host's state, one host's
record and history, and the operator's commands (suspend, resume,
maintenance, drain). The API decides and refuses; a refusal is the
command's error, with the API's text."""

from osc_lib.command import command
from osc_lib import exceptions

from instanceha.osc.v1 import common

LIST_COLUMNS = ("Host", "State", "Since", "Reason")
LONG_COLUMNS = LIST_COLUMNS + ("ID", "Heartbeat OK", "Busy",
                               "Operator Disabled", "Agent", "Retrying")
#: host show's fields, in order: (column, key of the status's host).
SHOW_FIELDS = (("host", "name"), ("id", "id"), ("state", "state"),
               ("since", "since"), ("reason", "reason"),
               ("heartbeat_ok", "heartbeat_ok"), ("busy", "busy"),
               ("retrying", "retrying"),
               ("operator_disabled", "operator_disabled"),
               ("agent", "agent"))


def _status(app):
    return common.send(app, "status", lambda api: api.status())


def _row(h, columns):
    values = {"Host": h.get("name") or h.get("id"), "State": h.get("state"),
              "Since": common.iso(h.get("since")),
              "Reason": h.get("reason"), "ID": h.get("id"),
              "Heartbeat OK": h.get("heartbeat_ok"), "Busy": h.get("busy"),
              "Operator Disabled": h.get("operator_disabled"),
              "Agent": h.get("agent"), "Retrying": h.get("retrying")}
    return tuple(values[c] for c in columns)


class ListHost(command.Lister):
    """Every compute host instanceha watches: its state, since when and
    why."""

    def get_parser(self, prog_name):
        parser = super().get_parser(prog_name)
        parser.add_argument("--long", action="store_true",
                            help="also the service id, the heartbeat, the "
                                 "work running, an operator's disable, "
                                 "the agent and a retrying action")
        return parser

    #: Set by take_action: the API's view is stale (exit status 1).
    _stale = False

    def run(self, parsed_args):
        return super().run(parsed_args) or (1 if self._stale else 0)

    def take_action(self, parsed_args):
        status = _status(self.app)
        live = status.get("live") or {}
        if live.get("ok") is False:
            # First, on stderr (-f json stays one document): the engine
            # behind the API has not passed for long; the table is what
            # it last knew. As 'instanceha status' says of its file.
            self._stale = True
            self.app.stderr.write("STALE: %s\n" % (
                live.get("reason") or "the engine says its view is stale"))
        cluster = status.get("cluster") or {}
        if cluster.get("ok") is False:
            # Beside the table (stderr): -f json stays one document.
            self.app.stderr.write("HOLD: %s\n" % cluster.get("reason"))
        columns = LONG_COLUMNS if parsed_args.long else LIST_COLUMNS
        return columns, [_row(h, columns) for h in status.get("hosts", ())]


class ShowHost(command.ShowOne):
    """One host's state, since when and why, and the work running for
    it."""

    def get_parser(self, prog_name):
        parser = super().get_parser(prog_name)
        parser.add_argument("host", metavar="<host>",
                            help="compute host name (or its service id)")
        return parser

    def take_action(self, parsed_args):
        hosts = _status(self.app).get("hosts", ())
        want = parsed_args.host
        found = next((h for h in hosts if h.get("name") == want), None) \
            or next((h for h in hosts if h.get("id") == want), None)
        if found is None:
            raise exceptions.CommandError(
                "instanceha: no host %r (known: %s)" % (want, ", ".join(
                    sorted(h.get("name") or h.get("id") for h in hosts))
                    or "none"))
        fields = [(column, found.get(key)) for column, key in SHOW_FIELDS]
        fields[3] = ("since", common.iso(found.get("since")))
        for extra in ("work", "servers"):
            if extra in found:
                fields.append((extra, found[extra]))
        return common.show(fields)


class _HostCommand(command.ShowOne):
    """A command sent as POST /hosts/<host>/<verb>; its 202 answer
    shown."""

    verb = None

    def get_parser(self, prog_name):
        parser = super().get_parser(prog_name)
        parser.add_argument("host", metavar="<host>",
                            help="compute host name (or its service id)")
        parser.add_argument("--reason", metavar="<reason>", default="",
                            help="why, for the journal, the log and "
                                 "Nova's disabled reason")
        return parser

    def body(self, parsed_args):
        return {"reason": parsed_args.reason or "by %s" % self.verb}

    def take_action(self, parsed_args):
        answer = common.send(
            self.app, self.verb,
            lambda api: api.command(parsed_args.host, self.verb,
                                    self.body(parsed_args)),
            ok=self.accepted)
        return common.show(self.fields(answer))

    accepted = (202,)

    def fields(self, answer):
        return [("host", answer.get("host")),
                ("command", answer.get("command")),
                ("state_before", answer.get("state")),
                ("still_running", answer.get("still_running"))]


class SuspendHost(_HostCommand):
    """Hands off a host: nothing automatic happens to it until the
    suspension ends or it is resumed."""

    verb = "suspend"

    def get_parser(self, prog_name):
        parser = super().get_parser(prog_name)
        how_long = parser.add_mutually_exclusive_group(required=True)
        how_long.add_argument("--seconds", metavar="<seconds>", type=float,
                              help="the suspension ends by itself after "
                                   "this long (at most the service's [api] "
                                   "max_suspend_seconds)")
        how_long.add_argument("--forever", action="store_true",
                              help="until 'openstack instanceha host "
                                   "resume'")
        return parser

    def body(self, parsed_args):
        body = super().body(parsed_args)
        if parsed_args.forever:
            body["forever"] = True
        else:
            body["seconds"] = parsed_args.seconds
        return body

    def fields(self, answer):
        until = answer.get("until")
        out = super().fields(answer)
        out.insert(3, ("until", "forever" if until is None
                       else common.iso(until)))
        return out


class ResumeHost(_HostCommand):
    """Watch a host again, retry its recovery, re-enable a drained host or
    cancel a drain in progress."""

    verb = "resume"

    def get_parser(self, prog_name):
        parser = super().get_parser(prog_name)
        back = parser.add_mutually_exclusive_group()
        back.add_argument("--fail-back", dest="fail_back",
                          action="store_const", const=True, default=None,
                          help="a drained host: once back in service, move "
                               "the servers its drain moved back onto it")
        back.add_argument("--no-fail-back", dest="fail_back",
                          action="store_const", const=False,
                          help="leave them where the drain put them")
        return parser

    def body(self, parsed_args):
        body = super().body(parsed_args)
        if parsed_args.fail_back is not None:
            body["fail_back"] = parsed_args.fail_back
        return body


class MaintenanceHost(_HostCommand):
    """Planned work on a host: its heartbeat loss is ignored."""

    verb = "maintenance"


class DrainHost(_HostCommand):
    """Move every server off a live host by live migrations (after a
    preflight read from Nova), then maintenance or decommission."""

    verb = "drain"
    accepted = (200, 202)

    def get_parser(self, prog_name):
        parser = super().get_parser(prog_name)
        parser.add_argument("--then", choices=("maintenance",
                                               "decommission"),
                            default="maintenance",
                            help="what the host is once drained (default: "
                                 "maintenance)")
        parser.add_argument("--concurrency", metavar="<count>", type=int,
                            default=None,
                            help="servers migrating from the host at once "
                                 "(default: the service's [drain] "
                                 "concurrency)")
        parser.add_argument("--force", action="store_true",
                            help="drain what can be drained even when the "
                                 "preflight refuses")
        parser.add_argument("--dry-run", action="store_true",
                            help="only report the preflight: nothing moves")
        return parser

    def body(self, parsed_args):
        body = super().body(parsed_args)
        body.update(then=parsed_args.then, force=parsed_args.force,
                    dry_run=parsed_args.dry_run)
        if parsed_args.concurrency is not None:
            body["concurrency"] = parsed_args.concurrency
        return body

    def fields(self, answer):
        plan = answer.get("preflight") or {}
        out = super().fields(answer)
        if answer.get("dry_run"):
            out = out[:3] + [("dry_run", True)]
        return out + [
            ("preflight", "passed" if plan.get("ok") else "REFUSED"),
            ("refusals", list(plan.get("refusals") or ())),
            ("steps", [_step(s) for s in plan.get("steps") or ()]),
            ("summary", list(plan.get("summary") or ()))]


def _step(step):
    """One server's way out, on one line."""
    return "%s %s%s" % (step.get("how", "?"),
                        step.get("name") or step.get("id", "?"),
                        " (%s)" % step["why"] if step.get("why") else "")


HISTORY_COLUMNS = ("Time", "Kind", "What", "Detail")
PAGE = 100


def _history_row(e, columns):
    kind = e.get("kind")
    if kind == "transition":
        what = "%s -> %s" % (e.get("from"), e.get("to"))
        detail = "%s from %s: %s" % (e.get("event"), e.get("source") or "-",
                                     e.get("reason"))
    elif kind == "action":
        what = e.get("action")
        if e.get("finished_at") is None:
            detail = "started, not finished"
        else:
            detail = "%s after %.1f s" % (e.get("outcome"),
                                          e["finished_at"] - e["at"])
            if e.get("detail"):
                detail += ": %s" % e["detail"]
    else:
        what = "server %s: %s" % (e.get("server_id"), e.get("status"))
        if e.get("dest_host"):
            what += " -> %s" % e["dest_host"]
        detail = e.get("detail") or ""
        if e.get("finished_at") is not None:
            detail = ("after %.1f s" % (e["finished_at"] - e["at"])
                      + (": %s" % detail if detail else ""))
    values = {"Time": e.get("time"), "Kind": kind, "What": what,
              "Detail": detail, "Marker": e.get("marker")}
    return tuple(values[c] for c in columns)


class HostHistory(command.Lister):
    """Every transition, action and evacuation of a host, in time order
    (the service's journal)."""

    def get_parser(self, prog_name):
        parser = super().get_parser(prog_name)
        parser.add_argument("host", metavar="<host>",
                            help="compute host name (or its service id)")
        parser.add_argument("--since", metavar="<time>",
                            help="from this time: ISO 8601 UTC "
                                 "(2026-11-25T07:00:00Z), epoch seconds, or "
                                 "a duration ago (30m, 2h, 7d)")
        parser.add_argument("--until", metavar="<time>",
                            help="before this time (same forms)")
        parser.add_argument("--limit", metavar="<count>", type=int,
                            default=None,
                            help="at most this many entries (the oldest)")
        parser.add_argument("--marker", metavar="<marker>", default=None,
                            help="after this entry (a marker from --long)")
        parser.add_argument("--long", action="store_true",
                            help="also each entry's marker")
        return parser

    def take_action(self, parsed_args):
        columns = HISTORY_COLUMNS + (("Marker",) if parsed_args.long
                                     else ())
        rows, marker, limit = [], parsed_args.marker, parsed_args.limit
        while True:
            # Pages of at most PAGE: a --limit above the service's [api]
            # history_max_limit is no refusal.
            want = None if limit is None else (
                limit if limit < 1 else min(PAGE, limit - len(rows)))
            page = common.send(
                self.app, "history",
                lambda api: api.history(
                    parsed_args.host, since=parsed_args.since,
                    until=parsed_args.until, limit=want, marker=marker))
            rows.extend(_history_row(e, columns)
                        for e in page.get("entries") or ())
            marker = page.get("next_marker")
            if marker is None or (limit is not None and len(rows) >= limit):
                break
        return columns, rows
