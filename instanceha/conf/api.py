import copy
import ipaddress
import os
import stat

from oslo_config import cfg

from instanceha.conf import _group

GROUP = "api"
OPTS = [
    cfg.BoolOpt("enabled", default=True,
                help="Serve the operator API: GET /status, /healthz, "
                     "/metrics (Prometheus), /hosts/<host>/history and POST "
                     "/hosts/<host>/suspend, /maintenance, /resume, "
                     "/storm/resume. See doc/api.md."),
    cfg.HostAddressOpt("listen_address", default="127.0.0.1",
                       help="Address the operator API binds to. With "
                            "auth_strategy = noauth it must be a loopback "
                            "address (the service refuses to start "
                            "otherwise): anyone who can reach an "
                            "unauthenticated API can suspend or resume "
                            "recovery of a host."),
    cfg.PortOpt("port", default=7411,
                help="TCP port of the operator API (0 picks a free port; "
                     "the chosen one is written to the status file)."),
    cfg.StrOpt("unix_socket", default=None,
               help="Serve the operator API on this unix socket path "
                    "instead of TCP (listen_address and port are then "
                    "unused; /metrics is only reachable through it). Its "
                    "directory must exist and be closed to other users "
                    "(no permission for 'other', e.g. mode 0750 or 0700: "
                    "systemd's RuntimeDirectory=instanceha with "
                    "RuntimeDirectoryMode=0750); the socket is made "
                    "0660. Access to the directory is then the "
                    "authentication, so auth_strategy = noauth is allowed "
                    "here."),
    cfg.StrOpt("auth_strategy", default="noauth",
               choices=[("noauth", "no authentication; only allowed on a "
                                   "loopback listen_address or a "
                                   "unix_socket"),
                        ("keystone", "every request except /healthz and "
                                     "/metrics (see "
                                     "public_health_and_metrics) needs a "
                                     "Keystone token (X-Auth-Token), "
                                     "validated by keystonemiddleware "
                                     "([keystone_authtoken]) and checked "
                                     "against the policy ([oslo_policy] "
                                     "policy_file; default: admin role)")],
               help="How the operator API authenticates requests. noauth "
                    "lets anyone who reaches the port command the service, "
                    "so it is refused on any address other than loopback; "
                    "use keystone on a management network."),
    cfg.BoolOpt("public_health_and_metrics", default=True,
                help="With auth_strategy = keystone, GET /healthz and GET "
                     "/metrics answer without a token (for load balancers "
                     "and Prometheus). They show host names and states; "
                     "set false to require a token and the "
                     "instanceha:health:read / instanceha:metrics:read "
                     "policy rules for them too."),
    cfg.IntOpt("max_request_body", default=65536, min=1024, max=1048576,
               help="Largest request body, in bytes, the API accepts "
                    "(commands are a few bytes of JSON); a larger one is "
                    "answered 413 without being read."),
    cfg.IntOpt("max_request_header", default=16384, min=1024,
               max=1048576,
               help="Largest request line plus headers, in bytes (a "
                    "Keystone token is a few hundred bytes); a larger "
                    "request is refused."),
    cfg.FloatOpt("request_timeout", default=30.0, min=1, max=600,
                 help="Seconds a client may take to send a request before "
                      "its connection is closed (a client that stops "
                      "sending mid-request frees its thread)."),
    cfg.IntOpt("threads", default=4, min=1, max=64,
               help="Threads serving API requests at once. Commands and "
                    "status are quick; more threads only help many slow "
                    "clients."),
    cfg.IntOpt("history_max_limit", default=1000, min=1, max=100000,
               help="Largest page GET /hosts/<host>/history returns "
                    "(its 'limit' parameter; the default page is 100 "
                    "entries or this, whichever is smaller)."),
    cfg.FloatOpt("stale_after", default=120.0, min=1, max=86400,
                 help="/healthz answers 503 when the reconciler has not "
                      "completed a pass for this many seconds (Nova "
                      "unreachable or the engine stuck)."),
    cfg.FloatOpt("max_suspend_seconds", default=604800.0, min=1,
                 help="Longest suspension, in seconds, that POST "
                      "/hosts/<host>/suspend (and 'instanceha suspend "
                      "--seconds') accepts; longer ones are refused, so a "
                      "typo cannot switch a host's HA off for years. A "
                      "suspension without end needs an explicit "
                      "{\"forever\": true} ('--forever'). Default: 7 days."),
]

_register_api, _list_api = _group.make(GROUP, OPTS, title="Operator API")


def _auth_token_opts():
    """keystonemiddleware's [keystone_authtoken] options with the password
    plugin's, so that a config file may set them (they are checked like
    ours) and the sample lists them. Copies: here none is required (noauth
    needs none); instanceha.api.auth hands the values to the middleware."""
    from keystoneauth1 import loading
    from keystonemiddleware.auth_token import _opts
    opts = []
    for _group_name, group_opts in _opts.list_opts():
        opts.extend(copy.copy(o) for o in group_opts)
    names = {o.dest for o in opts}
    for opt in loading.get_auth_plugin_conf_options("password"):
        if opt.dest not in names:
            opt = copy.copy(opt)
            opt.required = False
            opt.help = ("%s, of the account that validates tokens "
                        "(auth_type = password)" % opt.help.rstrip("."))
            opts.append(opt)
    for opt in opts:
        if len(opt.help or "") <= 20:
            opt.help = ("%s (keystonemiddleware, with [api] auth_strategy "
                        "= keystone)" % (opt.help or opt.name).rstrip("."))
    return opts


def _policy_opts():
    from oslo_policy import opts
    return [o for _group_name, group_opts in opts.list_opts()
            for o in group_opts]


def register_opts(conf):
    _register_api(conf)
    conf.register_opts(_auth_token_opts(), group="keystone_authtoken")
    conf.register_opts(_policy_opts(), group="oslo_policy")


def list_opts():
    return dict(_list_api(), keystone_authtoken=_auth_token_opts(),
                oslo_policy=_policy_opts())


def is_loopback(address):
    """True for a loopback IP address or the name localhost."""
    if str(address).lower() in ("localhost", "localhost.localdomain"):
        return True
    try:
        return ipaddress.ip_address(str(address).strip("[]")).is_loopback
    except ValueError:
        return False


def check_listener(conf):
    """A one-line reason the API must not start as configured, or None."""
    api = conf[GROUP]
    if not api.enabled:
        return None
    if api.unix_socket:
        return check_unix_socket(api.unix_socket)
    if api.auth_strategy == "noauth" and not is_loopback(api.listen_address):
        return ("[api] auth_strategy = noauth is only allowed on a loopback "
                "listen_address, not %s: set [api] auth_strategy = keystone "
                "(and [keystone_authtoken]) or listen on 127.0.0.1"
                % api.listen_address)
    return None


def check_unix_socket(path):
    """A reason ``path`` must not be the API's socket, or None: its
    directory must exist and give 'other' no permission, and nothing but
    an old socket may be at the path (it is replaced)."""
    if not os.path.isabs(path):
        return "[api] unix_socket %s: give an absolute path" % path
    directory = os.path.dirname(path)
    try:
        st = os.stat(directory)
    except OSError as e:
        return "[api] unix_socket %s: directory %s: %s" % (
            path, directory, e.strerror)
    if st.st_mode & 0o007:
        return ("[api] unix_socket %s: directory %s is open to other users "
                "(mode %04o): make it 0750 or 0700, its group and owner are "
                "who may command the service" % (
                    path, directory, stat.S_IMODE(st.st_mode)))
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return None
    except OSError as e:
        return "[api] unix_socket %s: %s" % (path, e.strerror)
    if not stat.S_ISSOCK(st.st_mode):
        return "[api] unix_socket %s: exists and is not a socket" % path
    return None


def validate(conf):
    why = check_listener(conf)
    if why is not None:
        raise cfg.Error(why)
