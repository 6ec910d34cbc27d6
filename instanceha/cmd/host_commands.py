"""``instanceha suspend|maintenance|drain|resume``: the operator's commands,
sent to the running service's API (its unix socket, else TCP; a Keystone
token with [api] auth_strategy = keystone), and its answer printed."""

import argparse
import math
import sys
import time
import urllib.parse

from instanceha.api import client
from instanceha.cmd.common import age, load_conf, split_config_args


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
        back = p.add_mutually_exclusive_group()
        back.add_argument("--fail-back", dest="fail_back",
                          action="store_const", const=True, default=None,
                          help="a drained host: once back in service, "
                               "move the servers its drain moved back "
                               "onto it")
        back.add_argument("--no-fail-back", dest="fail_back",
                          action="store_const", const=False,
                          help="leave them where the drain put them "
                               "(whatever [maintenance] fail_back says)")
        p.add_argument("--storm", action="store_true",
                       help="lift the storm hold for the hosts lost now "
                            "(more losses hold again), instead of "
                            "resuming one host")
    if verb == "drain":
        p.add_argument("--then", choices=("maintenance", "decommission"),
                       default="maintenance",
                       help="what the host is once drained (maintenance: "
                            "'instanceha resume HOST' re-enables it)")
        p.add_argument("--concurrency", type=int, default=None,
                       help="servers migrating from the host at once "
                            "(default: [drain] concurrency)")
        p.add_argument("--force", action="store_true",
                       help="drain what can be drained even when the "
                            "preflight refuses")
        p.add_argument("--dry-run", action="store_true",
                       help="only report the preflight: nothing moves")
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


def main(verb, argv):
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
    if verb == "resume" and args.fail_back is not None:
        body["fail_back"] = args.fail_back
    if verb == "drain":
        if args.concurrency is not None and args.concurrency < 1:
            p.error("--concurrency must be at least 1")
        body.update(then=args.then, force=args.force,
                    dry_run=args.dry_run)
        if args.concurrency is not None:
            body["concurrency"] = args.concurrency
    path = "/storm/resume" if storm else "/hosts/%s/%s" % (
        urllib.parse.quote(args.host, safe=""), verb)
    try:
        code, answer = client.call(conf, "POST", path, body)
    except client.ClientError as e:
        print("instanceha: %s" % e, file=sys.stderr)
        return 1
    if verb == "drain" and isinstance(answer, dict) \
            and "preflight" in answer:
        print(format_preflight(answer["preflight"]))
        if code == 200 and answer.get("dry_run"):
            return 0
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
                age(until - now))
    running = answer.get("still_running")
    if running:
        text += "\nstill running for %s: %s" % (answer["host"], running)
    return text



def format_preflight(plan):
    """A drain's preflight (the API's JSON of policy.drain's plan), for
    the operator: the verdict, every refusal, each server's way out."""
    lines = ["preflight: %s" % ("passed" if plan.get("ok") else "REFUSED")]
    for why in plan.get("refusals") or ():
        lines.append("  refused: %s" % why)
    for step in plan.get("steps") or ():
        lines.append("  %-8s %s%s" % (
            step.get("how", "?"), step.get("name") or step.get("id", "?"),
            " (%s)" % step["why"] if step.get("why") else ""))
    for line in plan.get("summary") or ():
        lines.append("  %s" % line)
    return "\n".join(lines)
