import copy
import ipaddress
import os
import stat

from oslo_config import cfg

from instanceha.conf import _group

GROUP = "api"
#: Where systemd's RuntimeDirectory=instanceha (mode 0750) puts it.
DEFAULT_SOCKET = "/run/instanceha/api.sock"
#: Longest unix socket path the kernel takes (sun_path less its NUL).
MAX_SOCKET_PATH = 107
#: What the TCP listener serves without authentication by default.
OPEN_READS = ("/healthz", "/readyz", "/metrics")
OPTS = [
    cfg.BoolOpt("enabled", default=True,
                help="Serve the operator API: GET /status, /healthz, "
                     "/metrics (Prometheus), /hosts/<host>/history and POST "
                     "/hosts/<host>/suspend, /maintenance, /resume, "
                     "/storm/resume. See doc/api.md."),
    cfg.StrOpt("unix_socket", default=DEFAULT_SOCKET,
               help="Unix socket serving the whole operator API (status, "
                    "history, commands); the CLI's default. Its directory "
                    "must exist, belong to the service's user (or root) "
                    "and be closed to other users (no permission for "
                    "'other', e.g. mode 0750: systemd's "
                    "RuntimeDirectory=instanceha with "
                    "RuntimeDirectoryMode=0750 makes /run/instanceha); "
                    "the socket is made 0660. Access to the directory is "
                    "then the authentication: whoever may enter it may "
                    "suspend a host's HA. Empty: no socket (commands then "
                    "need auth_strategy = keystone on TCP, or "
                    "allow_unauthenticated_tcp)."),
    cfg.BoolOpt("listen_tcp", default=True,
                help="Also listen on TCP listen_address:port. With "
                     "auth_strategy = keystone it serves the whole API; "
                     "with noauth only the open reads GET /healthz, "
                     "/readyz and /metrics (probes, Prometheus), unless "
                     "allow_unauthenticated_tcp. false: the unix socket "
                     "only."),
    cfg.HostAddressOpt("listen_address", default="127.0.0.1",
                       help="Address of the TCP listener. With "
                            "auth_strategy = noauth it must be a loopback "
                            "address (the service refuses to start "
                            "otherwise)."),
    cfg.PortOpt("port", default=7411,
                help="TCP port (0 picks a free port; the chosen one is "
                     "written to the status file)."),
    cfg.BoolOpt("allow_unauthenticated_tcp", default=False,
                help="With auth_strategy = noauth, serve the whole API, "
                     "commands included, on the loopback TCP listener "
                     "without authentication (the behaviour before the "
                     "unix socket became the default). Every local process "
                     "can then switch HA off (suspend a host --forever, "
                     "lift a storm hold), including every host-networked "
                     "container on the node. Prefer the unix socket or "
                     "auth_strategy = keystone."),
    cfg.StrOpt("auth_strategy", default="noauth",
               choices=[("noauth", "no authentication: the unix socket's "
                                   "directory permissions decide who may "
                                   "command; TCP (loopback only) serves "
                                   "only /healthz, /readyz and /metrics "
                                   "unless allow_unauthenticated_tcp"),
                        ("keystone", "every request except /healthz, "
                                     "/readyz and /metrics (see "
                                     "public_health_and_metrics) needs a "
                                     "Keystone token (X-Auth-Token), "
                                     "validated by keystonemiddleware "
                                     "([keystone_authtoken]) and checked "
                                     "against the policy ([oslo_policy] "
                                     "policy_file; default: admin role), "
                                     "on TCP and on the unix socket")],
               help="How the operator API authenticates requests. noauth "
                    "is refused on a TCP address other than loopback; use "
                    "keystone to command the service over a network."),
    cfg.BoolOpt("public_health_and_metrics", default=True,
                help="With auth_strategy = keystone, GET /healthz, "
                     "/readyz and /metrics answer without a token (for load balancers "
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
    # Imported here: keystonemiddleware registers options on oslo.config's
    # global CONF when it loads and costs ~0.1 s; only listing these
    # options (the sample, a check of [keystone_authtoken]) needs it.
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
    # Imported here for the same reason: only listing the options needs it.
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


def tcp_serves_commands(conf):
    """Whether the TCP listener serves the whole API (status, history,
    commands) and not only the open reads (:data:`OPEN_READS`)."""
    api = conf[GROUP]
    return bool(api.listen_tcp) and (api.auth_strategy == "keystone"
                                     or api.allow_unauthenticated_tcp)


def check_listener(conf):
    """A one-line reason the API must not start as configured, or None.
    The unix socket's directory is checked when the socket is bound
    (:func:`check_unix_socket`), with the TCP port, at start."""
    api = conf[GROUP]
    if not api.enabled:
        return None
    if not api.unix_socket and not api.listen_tcp:
        return ("[api] unix_socket is empty and [api] listen_tcp = false: "
                "nothing would serve the API; set [api] enabled = false "
                "for no API")
    if api.unix_socket and not os.path.isabs(api.unix_socket):
        return "[api] unix_socket %s: give an absolute path" % (
            api.unix_socket)
    if (api.listen_tcp and api.auth_strategy == "noauth"
            and not is_loopback(api.listen_address)):
        return ("[api] auth_strategy = noauth is only allowed on a loopback "
                "listen_address, not %s: set [api] auth_strategy = keystone "
                "(and [keystone_authtoken]) or listen on 127.0.0.1"
                % api.listen_address)
    return None


def _set_by_operator(conf, name):
    try:
        where = conf.get_location(name, GROUP)
    except (AttributeError, cfg.NoSuchOptError):
        return False
    return bool(where and where.location.is_user_controlled)


def listener_warnings(conf):
    """One-line warnings (no refusal) about the listeners: a TCP address
    or port the operator set, which no longer serves commands without
    authentication (an upgrade from when TCP was the only listener; an
    explicit allow_unauthenticated_tcp, true or false, says the operator
    decided), and an API where nothing accepts commands."""
    api = conf[GROUP]
    out = []
    if not api.enabled or api.auth_strategy != "noauth":
        return out
    if api.listen_tcp and not _set_by_operator(
            conf, "allow_unauthenticated_tcp") and any(
            _set_by_operator(conf, name)
            for name in ("listen_address", "port")):
        out.append(
            "[api] listen_address/port: without authentication TCP now "
            "serves only %s; status, history and commands are on the unix "
            "socket %s (the CLI's default). To keep commanding over TCP "
            "set [api] auth_strategy = keystone, or [api] "
            "allow_unauthenticated_tcp = true (any local process may then "
            "switch HA off); set it = false to keep TCP to the open reads "
            "without this warning" % (", ".join(OPEN_READS),
                                api.unix_socket or "(none: [api] "
                                "unix_socket is empty)"))
    if not api.unix_socket and not tcp_serves_commands(conf):
        out.append("[api] unix_socket is empty and TCP serves only %s: no "
                   "listener accepts operator commands"
                   % ", ".join(OPEN_READS))
    return out


def check_unix_socket(path):
    """A reason ``path`` must not be the API's socket, or None: its
    directory must exist, belong to this user or root and give 'other'
    no permission, and nothing but an old socket may be at the path (it
    is replaced)."""
    if not os.path.isabs(path):
        return "[api] unix_socket %s: give an absolute path" % path
    if len(os.fsencode(path)) > MAX_SOCKET_PATH:
        return ("[api] unix_socket %s: longer than %d bytes, which a unix "
                "socket cannot be" % (path, MAX_SOCKET_PATH))
    directory = os.path.dirname(path)
    try:
        st = os.stat(directory)
    except OSError as e:
        return ("[api] unix_socket %s: directory %s: %s (systemd's "
                "RuntimeDirectory=instanceha makes /run/instanceha; else "
                "create a directory of mode 0750 owned by the service's "
                "user, or set [api] unix_socket)" % (
                    path, directory, e.strerror))
    if st.st_uid not in (0, os.geteuid()):
        return ("[api] unix_socket %s: directory %s belongs to uid %d, "
                "neither this service's user nor root: its owner could "
                "replace the socket" % (path, directory, st.st_uid))
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
