"""The machine's own MariaDB and RabbitMQ, shared by runs kept apart by name.

Each run gets databases ``iha_<run>_*`` and a RabbitMQ vhost ``iha-<run>``;
both are dropped at teardown. Connection settings (defaults are the
machine's services):

* ``INSTANCEHA_MYSQL_HOST`` / ``_PORT`` / ``_USER`` / ``_PASSWORD``
  (127.0.0.1, 3306, root, empty)
* ``INSTANCEHA_RABBIT_HOST`` / ``_PORT`` / ``_USER`` / ``_PASSWORD``
  (127.0.0.1, 5672, guest, guest); vhosts are made with ``rabbitmqctl``.
"""

import os
import shutil
import subprocess
import urllib.parse

from functional.peers import procs
from functional.peers.errors import PeerError, PeerMissing


def _env(name, default):
    return os.environ.get("INSTANCEHA_" + name, default)


class MariaDB:
    peer = "mariadb"

    def __init__(self, run_id, log):
        self.host = _env("MYSQL_HOST", "127.0.0.1")
        self.port = int(_env("MYSQL_PORT", "3306"))
        self.user = _env("MYSQL_USER", "root")
        self.password = _env("MYSQL_PASSWORD", "")
        self.prefix = "iha_%s" % run_id
        self.log = log
        self.created = []

    def _client(self):
        exe = shutil.which("mariadb") or shutil.which("mysql")
        if not exe:
            raise PeerMissing(self.peer, "no mariadb/mysql client on PATH; "
                              "run tools/realpeers/install.sh", self.log)
        argv = [exe, "--protocol=TCP", "-h", self.host, "-P", str(self.port),
                "-u", self.user, "--batch"]
        env = dict(os.environ)
        if self.password:
            env["MYSQL_PWD"] = self.password  # not on the command line
        return argv, env

    def sql(self, statement):
        argv, env = self._client()
        procs.run(self.peer, argv, self.log, env=env, timeout=60,
                  input=statement.encode())

    def check(self):
        if not procs.port_open(self.port, self.host):
            raise PeerMissing(self.peer, "nothing listens on %s:%d (start it: "
                              "start-stop-daemon --start --background --exec "
                              "/usr/sbin/mariadbd)" % (self.host, self.port),
                              self.log)
        self.sql("SELECT 1;")

    def create(self, *names):
        dbs = ["%s_%s" % (self.prefix, n) for n in names]
        self.sql("".join("DROP DATABASE IF EXISTS `%s`; CREATE DATABASE `%s` "
                         "CHARACTER SET utf8mb4;" % (d, d) for d in dbs))
        self.created.extend(dbs)
        return dbs

    def url(self, db):
        auth = urllib.parse.quote(self.user, safe="")
        if self.password:
            auth += ":" + urllib.parse.quote(self.password, safe="")
        return "mysql+pymysql://%s@%s:%d/%s?charset=utf8mb4" % (
            auth, self.host, self.port, db)

    def drop_all(self):
        if self.created:
            try:
                self.sql("".join("DROP DATABASE IF EXISTS `%s`;" % d
                                 for d in self.created))
            except PeerError:
                pass
            self.created = []


class RabbitVhost:
    peer = "rabbitmq"

    def __init__(self, run_id, log):
        self.host = _env("RABBIT_HOST", "127.0.0.1")
        self.port = int(_env("RABBIT_PORT", "5672"))
        self.user = _env("RABBIT_USER", "guest")
        self.password = _env("RABBIT_PASSWORD", "guest")
        self.vhost = "iha-%s" % run_id
        self.log = log
        self.made = False

    def _ctl(self, *args):
        exe = shutil.which("rabbitmqctl")
        if not exe:
            raise PeerMissing(self.peer, "rabbitmqctl not found; a per-run "
                              "vhost cannot be made", self.log)
        procs.run(self.peer, [exe, "-q"] + list(args), self.log, timeout=60)

    def create(self):
        if not procs.port_open(self.port, self.host):
            raise PeerMissing(self.peer, "nothing listens on %s:%d (start it: "
                              "rabbitmq-server -detached)"
                              % (self.host, self.port), self.log)
        self._ctl("add_vhost", self.vhost)
        self.made = True
        self._ctl("set_permissions", "-p", self.vhost, self.user,
                  ".*", ".*", ".*")

    @property
    def url(self):
        return "rabbit://%s:%s@%s:%d/%s" % (
            urllib.parse.quote(self.user, safe=""),
            urllib.parse.quote(self.password, safe=""), self.host, self.port,
            urllib.parse.quote(self.vhost, safe=""))

    def delete(self):
        if self.made:
            try:
                self._ctl("delete_vhost", self.vhost)
            except PeerError:
                pass
            self.made = False


def rabbit_ok():
    """True if rabbitmqctl answers (used to decide skip vs. run)."""
    exe = shutil.which("rabbitmqctl")
    if not exe:
        return False
    return subprocess.run([exe, "-q", "status"], capture_output=True,
                          timeout=60).returncode == 0
