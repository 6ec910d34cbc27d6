"""Real peers for the event-source tests: a RabbitMQ vhost of our own per
run, a Nova-like notifier publishing on it, and the real fence_kdump_send.

``INSTANCEHA_REQUIRE_SERVICES=1`` turns "RabbitMQ (or fence_kdump_send) is
not there" from a skip into a failure naming it.
"""

import os
import pathlib
import shutil
import socket
import subprocess
import threading
import time
import urllib.parse
import uuid

import pytest

from functional import waiting

REPO = pathlib.Path(__file__).resolve().parents[1]
REQUIRE = os.environ.get("INSTANCEHA_REQUIRE_SERVICES") == "1"
RABBIT_HOST = os.environ.get("INSTANCEHA_RABBIT_HOST", "127.0.0.1")
RABBIT_PORT = int(os.environ.get("INSTANCEHA_RABBIT_PORT", "5672"))
RABBIT_USER = os.environ.get("INSTANCEHA_RABBIT_USER", "guest")
RABBIT_PASSWORD = os.environ.get("INSTANCEHA_RABBIT_PASSWORD", "guest")


def missing(what):
    if REQUIRE:
        pytest.fail(what, pytrace=False)
    pytest.skip(what)


def port_open(host, port, timeout=1.0):
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


def rabbitmqctl(*args, timeout=60, check=True, stdin=None):
    exe = shutil.which("rabbitmqctl")
    if exe is None:
        missing("RabbitMQ: rabbitmqctl not found, cannot make a vhost")
    result = subprocess.run([exe, "-q"] + list(args), capture_output=True,
                            text=True, timeout=timeout, input=stdin)
    if check and result.returncode != 0:
        raise RuntimeError("rabbitmqctl %s failed: %s"
                           % (args[0], result.stderr.strip()))
    return result


class RabbitVhost:
    """A vhost of our own on the machine's RabbitMQ, deleted afterwards.

    With ``own_user=True`` a broker user of its own too (random name and
    password, allowed on this vhost only, deleted afterwards), for tests
    whose logs may hold the shared user's password as an ordinary word
    (the default 'guest': "the guest crashed")."""

    def __init__(self, own_user=False):
        self.name = "instanceha-events-%s" % uuid.uuid4().hex[:8]
        self.user, self.password = RABBIT_USER, RABBIT_PASSWORD
        self.own_user = own_user
        if own_user:
            self.user = self.name
            self.password = uuid.uuid4().hex

    def __enter__(self):
        if not port_open(RABBIT_HOST, RABBIT_PORT):
            missing("RabbitMQ: nothing listens on %s:%d (start it with "
                    "'rabbitmq-server -detached')" % (RABBIT_HOST, RABBIT_PORT))
        rabbitmqctl("add_vhost", self.name)
        if self.own_user:
            # The password on standard input, not the argument list.
            rabbitmqctl("add_user", self.user, stdin=self.password)
        rabbitmqctl("set_permissions", "-p", self.name, self.user,
                    ".*", ".*", ".*")
        return self

    def __exit__(self, *exc):
        rabbitmqctl("delete_vhost", self.name, check=False)
        if self.own_user:
            rabbitmqctl("delete_user", self.user, check=False)

    @property
    def url(self):
        return "rabbit://%s:%s@%s:%d/%s" % (
            urllib.parse.quote(self.user, safe=""),
            urllib.parse.quote(self.password, safe=""), RABBIT_HOST,
            RABBIT_PORT, urllib.parse.quote(self.name, safe=""))

    def close_connections(self, why="instanceha test: broker outage"):
        """Drop every client connection of this vhost, as a broker restart
        does, without disturbing other users of the shared broker."""
        rabbitmqctl("close_all_connections", "--vhost", self.name, why)

    def connection_count(self):
        out = rabbitmqctl("list_connections", "-p", self.name, "name").stdout
        return len([line for line in out.splitlines() if line.strip()])


def fast_reconnect(conf):
    """oslo.messaging rabbit options for tests: reconnect within ~1 s."""
    import oslo_messaging.opts
    for group, opts in oslo_messaging.opts.list_opts():
        if group in (None, "oslo_messaging_rabbit"):
            conf.register_opts(opts, group=group)
    conf.set_override("rabbit_retry_interval", 1,
                      group="oslo_messaging_rabbit")
    conf.set_override("rabbit_retry_backoff", 0,
                      group="oslo_messaging_rabbit")
    conf.set_override("rabbit_interval_max", 1,
                      group="oslo_messaging_rabbit")
    conf.set_override("kombu_reconnect_delay", 0.1,
                      group="oslo_messaging_rabbit")


class NovaNotifier:
    """Publishes like Nova: exchange 'nova', messagingv2, versioned topic.

    "Another actor" as far as instanceha is concerned: its own conf, its
    own transport and connection.
    """

    def __init__(self, url, publisher_id="nova-api:controller",
                 topics=("versioned_notifications",)):
        import oslo_messaging
        from oslo_config import cfg
        self.conf = cfg.ConfigOpts()
        self.conf([], project="nova-test", default_config_files=[])
        fast_reconnect(self.conf)
        self.conf.set_override("control_exchange", "nova")  # as Nova does
        self.transport = oslo_messaging.get_notification_transport(
            self.conf, url=url)
        self.notifier = oslo_messaging.Notifier(
            self.transport, publisher_id, driver="messagingv2",
            topics=list(topics))

    def info(self, event_type, payload):
        self.notifier.info({}, event_type, payload)

    def error(self, event_type, payload):
        self.notifier.error({}, event_type, payload)

    def close(self):
        self.transport.cleanup()


def publish_raw(url, exchange, routing_key, body):
    """Put a message that is not an oslo.messaging envelope on the queue
    (what a misbehaving publisher could do)."""
    import kombu
    with kombu.Connection(url.replace("rabbit://", "amqp://", 1)) as conn:
        ex = kombu.Exchange(exchange, type="topic", durable=False)
        producer = conn.Producer()
        producer.publish(body, exchange=ex, routing_key=routing_key,
                         content_type="application/octet-stream",
                         content_encoding="binary")


def wait_for(predicate, timeout=10.0, interval=0.02):
    """Poll ``predicate`` until true; its last value on timeout."""
    return waiting.poll(predicate, timeout, interval)


class Sink:
    def __init__(self):
        self.events = []
        self.times = []
        self._cond = threading.Condition()

    def __call__(self, event):
        with self._cond:
            self.events.append(event)
            self.times.append(time.monotonic())
            self._cond.notify_all()

    def wait(self, count, timeout=10.0):
        with self._cond:
            self._cond.wait_for(lambda: len(self.events) >= count, timeout)
            return list(self.events)


def fence_kdump_send():
    """Path of the real fence_kdump_send (fetched by tools/ on first use)."""
    script = REPO / "tools" / "get-fence-kdump-send.sh"
    result = subprocess.run(["sh", str(script)], capture_output=True,
                            text=True, timeout=300)
    path = result.stdout.strip().splitlines()[-1:] if result.stdout else []
    if result.returncode != 0 or not path or not os.access(path[0], os.X_OK):
        missing("fence_kdump_send: %s failed: %s"
                % (script.name, result.stderr.strip()[-300:]))
    return path[0]


def make_conf(group, **overrides):
    """A parsed instanceha conf with ``overrides`` in ``group``."""
    from instanceha import conf as ih_conf
    return ih_conf.make({group: overrides})


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class PrivateRabbit:
    """A RabbitMQ node of our own (own node name, ports, state, cookie) on
    127.0.0.1, so a test may restart the broker without disturbing anyone
    using the machine's shared one. About 3-5 s to start."""

    BIN = pathlib.Path("/usr/lib/rabbitmq/bin")

    def __init__(self, workdir):
        self.dir = pathlib.Path(workdir)
        self.port = free_port()
        self.node = "iha-events-%d-%s@localhost" % (os.getpid(),
                                                     uuid.uuid4().hex[:6])
        self.env = dict(
            os.environ, HOME=str(self.dir), RABBITMQ_NODENAME=self.node,
            RABBITMQ_NODE_IP_ADDRESS="127.0.0.1",
            RABBITMQ_NODE_PORT=str(self.port),
            RABBITMQ_DIST_PORT=str(free_port()),
            RABBITMQ_MNESIA_BASE=str(self.dir / "mnesia"),
            RABBITMQ_LOG_BASE=str(self.dir / "log"),
            RABBITMQ_CONFIG_FILE=str(self.dir / "rabbitmq.conf"),
            RABBITMQ_ENABLED_PLUGINS_FILE=str(self.dir / "enabled_plugins"))

    @property
    def url(self):
        return "rabbit://%s:%s@127.0.0.1:%d/" % (
            RABBIT_USER, RABBIT_PASSWORD, self.port)

    def _ctl(self, *args, timeout=60):
        return subprocess.run([str(self.BIN / "rabbitmqctl"), "-q", "-n",
                               self.node] + list(args), env=self.env,
                              capture_output=True, text=True, timeout=timeout)

    def start(self, timeout=60):
        if not (self.BIN / "rabbitmq-server").exists():
            missing("RabbitMQ: %s/rabbitmq-server not installed" % self.BIN)
        self.dir.mkdir(parents=True, exist_ok=True)
        (self.dir / "rabbitmq.conf").write_text(
            "listeners.tcp.default = 127.0.0.1:%d\n" % self.port)
        (self.dir / "enabled_plugins").write_text("[].\n")
        subprocess.run([str(self.BIN / "rabbitmq-server"), "-detached"],
                       env=self.env, check=True, capture_output=True,
                       timeout=60)
        if not wait_for(lambda: port_open("127.0.0.1", self.port, 0.2),
                        timeout, 0.1):
            log = "\n".join(p.read_text()[-2000:]
                            for p in (self.dir / "log").glob("*.log"))
            raise RuntimeError("private RabbitMQ did not start:\n" + log)
        return self

    def stop(self):
        self._ctl("stop")
        wait_for(lambda: not port_open("127.0.0.1", self.port, 0.2), 30, 0.1)

    def restart(self):
        """Stop the whole broker process and start it again."""
        self.stop()
        self.start()
