"""The heartbeat agent's ``restart_command`` on the real-peer bed.

``agent_restart_compute.py SOCKET HOST``: asks the test process, which
owns the fake computes' processes as systemd owns real ones, to restart
HOST's nova-compute (``functional/realnova/agents.py``,
``ComputeRestarter``), over its unix socket. Exits 0 once the compute was
started again, 1 with the answer on stderr otherwise. Standard library
only: it runs as the agent's child.
"""

import socket
import sys


def main(argv):
    if len(argv) != 3:
        sys.stderr.write("usage: %s SOCKET HOST\n" % argv[0])
        return 2
    path, host = argv[1], argv[2]
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(30)
        s.connect(path)
        s.sendall((host + "\n").encode())
        answer = s.makefile().readline().strip()
    if answer != "ok":
        sys.stderr.write("restart of %s refused: %s\n" % (host, answer))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
