"""``openstack instanceha server repair | repair show``: a one-off
instance repair of a server (up to a level), clearing a server's repair
failure, and what instance repair knows of a server. The API validates
and refuses; a refusal is the command's error, with the API's text."""

from osc_lib.command import command

from instanceha.api.client import REPAIR_LEVELS as LEVELS
from instanceha.osc.v1 import common


class RepairServer(command.ShowOne):
    """Ask instanceha to repair a server now (its ladder, up to
    --level), or clear its repair failure (--clear)."""

    def get_parser(self, prog_name):
        parser = super().get_parser(prog_name)
        parser.add_argument("server", metavar="<server>",
                            help="server id")
        what = parser.add_mutually_exclusive_group()
        what.add_argument("--level", metavar="<level>", choices=LEVELS,
                          help="the highest repair allowed this time "
                               "(%s)" % ", ".join(LEVELS))
        what.add_argument("--clear", action="store_true",
                          help="clear the server's repair failure")
        parser.add_argument("--reason", metavar="<reason>", default="",
                            help="why, for the journal and the log")
        return parser

    def take_action(self, parsed_args):
        body = {"reason": parsed_args.reason or "by openstack instanceha"}
        if parsed_args.clear:
            body["clear"] = True
        elif parsed_args.level:
            body["level"] = parsed_args.level
        answer = common.send(
            self.app, "repair",
            lambda api: api.repair(parsed_args.server, body), ok=(202,))
        return common.show([(key, answer.get(key)) for key in
                            ("server", "command", "level", "case")
                            if key in answer])


class ShowServerRepair(command.ShowOne):
    """What instance repair knows of a server: its case, markers and
    journal rows."""

    def get_parser(self, prog_name):
        parser = super().get_parser(prog_name)
        parser.add_argument("server", metavar="<server>",
                            help="server id")
        return parser

    def take_action(self, parsed_args):
        answer = common.send(
            self.app, "repair show",
            lambda api: api.repair_case(parsed_args.server))
        return common.show(sorted(answer.items()))
