"""Who may call the operator API: Keystone tokens and an oslo.policy rule.

``[api] auth_strategy = keystone`` puts keystonemiddleware's auth_token in
front of every endpoint except the public reads (/healthz, /metrics, see
``[api] public_health_and_metrics``); a request it let through is then
checked against the endpoint's policy rule (default: the admin role).
``noauth`` checks nothing and is only allowed on a loopback address
(:func:`instanceha.conf.api.check_listener`).

Policy rules (override them in ``[oslo_policy] policy_file``):
"""

from oslo_config import cfg
from oslo_context import context as oslo_context
from oslo_policy import policy
import structlog

LOG = structlog.get_logger("instanceha.api")

ADMIN = "role:admin"

RULES = [
    policy.RuleDefault("admin_api", ADMIN,
                       description="The operators of instanceha."),
    policy.DocumentedRuleDefault(
        "instanceha:status:read", "rule:admin_api",
        "Read every host's state (GET /status).",
        [{"method": "GET", "path": "/status"}]),
    policy.DocumentedRuleDefault(
        "instanceha:history:read", "rule:admin_api",
        "Read a host's journal: transitions, actions, evacuations.",
        [{"method": "GET", "path": "/hosts/{host}/history"}]),
    policy.DocumentedRuleDefault(
        "instanceha:host:suspend", "rule:admin_api",
        "Suspend a host's high availability (hands off).",
        [{"method": "POST", "path": "/hosts/{host}/suspend"}]),
    policy.DocumentedRuleDefault(
        "instanceha:host:maintenance", "rule:admin_api",
        "Put a host in maintenance (heartbeat loss ignored).",
        [{"method": "POST", "path": "/hosts/{host}/maintenance"}]),
    policy.DocumentedRuleDefault(
        "instanceha:host:drain", "rule:admin_api",
        "Drain a live host by migrations (or only report its preflight "
        "with dry_run).",
        [{"method": "POST", "path": "/hosts/{host}/drain"}]),
    policy.DocumentedRuleDefault(
        "instanceha:host:resume", "rule:admin_api",
        "Watch a host again, or retry its recovery.",
        [{"method": "POST", "path": "/hosts/{host}/resume"}]),
    policy.DocumentedRuleDefault(
        "instanceha:storm:resume", "rule:admin_api",
        "Lift the storm hold for the hosts lost now.",
        [{"method": "POST", "path": "/storm/resume"}]),
    policy.DocumentedRuleDefault(
        "instanceha:server:read", "rule:admin_api",
        "Read a server's instance repair: its case, markers and journal "
        "rows.",
        [{"method": "GET", "path": "/servers/{server}/repair"}]),
    policy.DocumentedRuleDefault(
        "instanceha:server:repair", "rule:admin_api",
        "Ask for a one-off repair of a server, or clear its failure.",
        [{"method": "POST", "path": "/servers/{server}/repair"}]),
    policy.DocumentedRuleDefault(
        "instanceha:health:read", "rule:admin_api",
        "GET /healthz, when [api] public_health_and_metrics is false.",
        [{"method": "GET", "path": "/healthz"}]),
    policy.DocumentedRuleDefault(
        "instanceha:metrics:read", "rule:admin_api",
        "GET /metrics, when [api] public_health_and_metrics is false.",
        [{"method": "GET", "path": "/metrics"}]),
]

__doc__ += "\n".join("    %-30s %s" % (r.name, r.check_str) for r in RULES)


class AuthError(Exception):
    """The API's authentication cannot be set up as configured."""


def list_rules():
    """oslo.policy's ``oslo.policy.policies`` entry point."""
    return RULES


def make_enforcer(conf):
    """The policy enforcer, its file read now so that a broken policy file
    stops the start instead of refusing every request later."""
    enforcer = policy.Enforcer(conf)
    enforcer.register_defaults(RULES)
    try:
        enforcer.load_rules()
    except Exception as e:  # noqa: BLE001 - one line naming the file
        raise AuthError("[oslo_policy] policy_file %s: %s: %s" % (
            conf.oslo_policy.policy_file, type(e).__name__, e))
    return enforcer


def authorize(enforcer, rule, environ):
    """(allowed, credentials summary for the log) for a request that
    auth_token let through."""
    ctx = oslo_context.RequestContext.from_environ(environ)
    creds = ctx.to_policy_values()
    allowed = enforcer.enforce(rule, {}, creds)
    who = "user=%s project=%s roles=%s" % (
        creds.get("user_id"), creds.get("project_id"),
        ",".join(creds.get("roles") or []))
    return bool(allowed), who


def _middleware_conf(conf):
    """A private ConfigOpts for keystonemiddleware holding our
    [keystone_authtoken] values: the middleware registers the auth
    plugin's options as required there, which our own conf (where they
    are optional: noauth needs none) must not."""
    # Local, like keystone() below: only auth_strategy = keystone needs it.
    from keystoneauth1 import loading
    from keystonemiddleware.auth_token import _opts
    private = cfg.ConfigOpts()
    private([], project="instanceha", default_config_files=[])
    ours = conf.keystone_authtoken
    group = "keystone_authtoken"
    for _name, opts in _opts.list_opts():
        private.register_opts(opts, group=group)
    auth_type = ours.auth_type
    if not auth_type:
        raise AuthError("[keystone_authtoken] auth_type is not set: with "
                        "[api] auth_strategy = keystone the service needs "
                        "an account to validate tokens (auth_type = "
                        "password, auth_url, username, password, ...)")
    try:
        plugin = loading.get_auth_plugin_conf_options(auth_type)
    except Exception as e:  # noqa: BLE001 - an unknown plugin name
        raise AuthError("[keystone_authtoken] auth_type %s: %s"
                        % (auth_type, e))
    private.register_opts(plugin, group=group)
    for opt in list(_opts.list_opts()[0][1]) + list(plugin):
        try:
            value = ours[opt.dest]
        except cfg.NoSuchOptError:
            continue
        if value is not None:
            private.set_override(opt.dest, value, group=group)
    # A request without a valid token is refused by the middleware itself.
    private.set_override("delay_auth_decision", False, group=group)
    try:
        # Said now, not at the first request: a missing auth_url, ...
        loading.load_auth_from_conf_options(private, group)
    except Exception as e:  # noqa: BLE001 - one line naming the options
        raise AuthError("[keystone_authtoken]: %s: %s"
                        % (type(e).__name__, e))
    return private


def keystone(app, conf):
    """``app`` behind keystonemiddleware's auth_token."""
    # Local: importing keystonemiddleware registers its options on
    # oslo.config's global CONF (and costs ~0.1 s); only auth_strategy =
    # keystone needs it, not noauth nor the oslo.policy tools (list_rules).
    from keystonemiddleware import auth_token
    try:
        return auth_token.AuthProtocol(
            app, {"oslo_config_config": _middleware_conf(conf)})
    except AuthError:
        raise
    except Exception as e:  # noqa: BLE001 - one line, no traceback
        raise AuthError("[keystone_authtoken]: %s: %s"
                        % (type(e).__name__, e))
