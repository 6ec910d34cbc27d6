"""``openstack instanceha storm resume``: lift the storm hold."""

from osc_lib.command import command

from instanceha.osc.v1 import common


class ResumeStorm(command.ShowOne):
    """Lift the storm hold for the hosts lost now (more losses hold
    again)."""

    def get_parser(self, prog_name):
        parser = super().get_parser(prog_name)
        parser.add_argument("--reason", metavar="<reason>", default="",
                            help="why, for the journal and the log")
        return parser

    def take_action(self, parsed_args):
        answer = common.send(
            self.app, "storm resume",
            lambda api: api.resume_storm(
                {"reason": parsed_args.reason or "by storm resume"}),
            ok=(202,))
        lifted = answer.get("lifted") or {}
        return common.show([("command", answer.get("command")),
                            ("lifted", lifted)])
