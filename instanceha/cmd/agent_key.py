"""``instanceha agent-key HOST --output FILE``: write one host's own key.

Run on an engine node: the host's key is derived from the engines'
master key (``[agent] master_key_file`` of the engine's configuration, or
``--master-key-file``) and the host's name as Nova knows it (the 'host'
of its nova-compute service), and written to FILE, mode 0600, for the
operator's deployment tool to install as that host's
``/etc/instanceha/agent.key`` (the agent's ``[agent] key_file``). The
master key never leaves the engines; a host's key speaks for that host
only. ``--previous`` derives from ``[agent] previous_master_key_file``
(during a rotation of the master: the agent's ``previous_key_file``).

The file is written whole or not at all (a temporary file in the same
directory, renamed), never readable by group or others; an existing FILE
is replaced only with ``--force``. ``--output -`` prints the line on
stdout (for a tool that writes the file itself). Nothing of the key is
logged; the line printed on stderr names the host and the key's id.
"""

import argparse
import os
import sys
import tempfile

from instanceha.cmd.common import load_conf, split_config_args
from instanceha.heartbeat import keys


def parser():
    p = argparse.ArgumentParser(
        prog="instanceha agent-key",
        description="Write HOST's own heartbeat key (derived from the "
                    "engines' master key) for its agent.")
    p.add_argument("host", help="the compute host's name as Nova knows it")
    p.add_argument("--output", "-o", required=True,
                   help="the key file to write (mode 0600); - for stdout")
    p.add_argument("--master-key-file",
                   help="the master key (default: [agent] master_key_file, "
                        "or previous_master_key_file with --previous, of "
                        "the engine's configuration)")
    p.add_argument("--previous", action="store_true",
                   help="derive from the previous master key (a rotation)")
    p.add_argument("--force", action="store_true",
                   help="replace FILE if it exists")
    return p


def main(argv):
    mine, oslo = split_config_args(argv)
    p = parser()
    args = p.parse_args(mine)
    path = args.master_key_file
    if not path:
        group = load_conf(oslo).agent
        path = (group.previous_master_key_file if args.previous
                else group.master_key_file)
        if not path:
            print("instanceha agent-key: [agent] %s is not set: there is "
                  "no master key to derive %s's key from (or give "
                  "--master-key-file)" % (
                      "previous_master_key_file" if args.previous
                      else "master_key_file", args.host), file=sys.stderr)
            return 2
    try:
        master = keys.load_key(path, host_key=False)
        key = keys.derive_host_key(master, args.host)
    except (keys.KeyFileError, ValueError) as e:
        print("instanceha agent-key: %s" % e, file=sys.stderr)
        return 2
    line = keys.host_key_line(key)
    if args.output == "-":
        sys.stdout.write(line)
    else:
        try:
            write_key_file(args.output, line, args.force)
        except OSError as e:
            print("instanceha agent-key: %s: %s" % (
                args.output, e.strerror or e), file=sys.stderr)
            return 1
    print("instanceha agent-key: the key of host %s (key id %s, master "
          "key id %s)%s" % (key.host, key.kid, master.kid,
                            "" if args.output == "-"
                            else " written to %s, mode 0600" % args.output),
          file=sys.stderr)
    return 0


def write_key_file(path, line, force=False):
    """``line`` into ``path``, mode 0600, whole or not at all; an existing
    file is an error (FileExistsError) unless ``force``."""
    path = os.fspath(path)
    if not force and os.path.lexists(path):
        raise FileExistsError(17, "exists (--force replaces it)")
    directory = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix=".agent-key-", dir=directory)
    try:
        os.fchmod(fd, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(line)
            f.flush()
            os.fsync(f.fileno())
        if force:
            os.replace(tmp, path)
        else:
            os.link(tmp, path)      # fails if it appeared meanwhile
            os.unlink(tmp)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
