"""A kernel crash with kdump: the host's dump kernel sends fence_kdump
messages (as ``fence_kdump_send`` does: 8 bytes over UDP, from the
host's address) while it writes the dump.

``kdump``: the default ([kdump] action = fence_after_dump). A message
makes the host suspect; the power-off waits for the dump to end (no
message for [kdump] timeout) and comes then, without a grace period.
(While Nova still reports the service up, each message makes the host
suspect and Nova's next report makes it active again: the timeline shows
it.)

``kdump-trusted``: the opt-in for a trusted kdump network ([kdump]
action = evacuate): once Nova reports the service down, a message proves
the host dead; it counts as fenced at once and is evacuated while it
dumps, never powered off.
"""

import socket
import struct
import threading
import time

from instanceha.drills import world
from instanceha.sources import kdump as kdump_source

STEP_BUDGET = 60.0
VICTIM = "compute-1"
#: The dump kernel's messages: every 0.5 s for 4 s.
INTERVAL, DUMP_TIME = 0.5, 4.0
#: The victim's dump kernel sends from 127.0.0.1 (loopback): mapped to it.
KDUMP = {"enabled": True, "listen_address": "127.0.0.1", "port": 0,
         "resolve_names": False, "host_map": VICTIM + ":127.0.0.1",
         "timeout": 2.0, "max_dump_time": 30.0}
#: The engine stamps a message on receipt with its wall clock, the
#: timeline reads the monotonic one: they may disagree by a few ms.
CLOCK_SLACK = 0.05
MESSAGE = struct.pack("<II", kdump_source.MAGIC, kdump_source.VERSION)


class DumpKernel:
    """fence_kdump_send on the crashed host, in a thread: a message
    every ``interval`` seconds for ``duration`` seconds. Records the BMC's
    power at each message: a dump cut short by a power-off shows as Off."""

    def __init__(self, drill, port, interval=INTERVAL, duration=DUMP_TIME):
        self.drill = drill
        self.port = port
        self.interval = interval
        self.duration = duration
        self.sent = 0
        self.power_at_send = []
        self.done = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True,
                                        name="drill-dump-kernel")

    def start(self):
        self._thread.start()
        return self

    def _run(self):
        end = time.monotonic() + self.duration
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
            sock.bind(("127.0.0.1", 0))
            while True:
                power = self.drill.cloud.snapshot()["hosts"][VICTIM]["power"]
                self.power_at_send.append(power)
                if power != "on":       # the dump died with the power
                    self.drill.say("%-10s dump kernel: cut short by a "
                                   "power-off after %d messages"
                                   % (VICTIM, self.sent))
                    break
                sock.sendto(MESSAGE, ("127.0.0.1", self.port))
                self.sent += 1
                if time.monotonic() + self.interval >= end:
                    # The dump is written: this message is its last. The
                    # engine's [kdump] timeout runs from it.
                    self.drill.say("%-10s dump kernel: last fence_kdump "
                                   "message (%d sent); the dump is written"
                                   % (VICTIM, self.sent), mark="last message")
                    break
                if self.sent == 1:
                    self.drill.say("%-10s dump kernel: first fence_kdump "
                                   "message" % VICTIM, mark="first message")
                time.sleep(self.interval)
        self.done.set()

    def join(self, budget):
        self._thread.join(budget)
        return self.done.is_set()


def _crash(d):
    port = d.status()["sources"]["kdump"]["port"]
    servers = world.servers_on(d.cloud, VICTIM)
    d.act("%s's kernel crashes: it stops, its BMC reads On, its dump "
          "kernel starts sending fence_kdump to port %d (for %gs)"
          % (VICTIM, port, DUMP_TIME), mark="crash")
    d.cloud.kill(VICTIM)
    dump = DumpKernel(d, port).start()
    return servers, dump


def _check_recovered(d, servers):
    d.check_recovered(servers, {VICTIM})
    accepted = d.status()["sources"]["kdump"]["accepted"]
    d.check(accepted >= 1, "the engine took no fence_kdump message")
    reasons = [t["reason"] for t in d.journal.transitions()
               if t["host_name"] == VICTIM and t["dst"] == "suspect"]
    d.check(reasons and "kdump" in reasons[0],
            "%s was not suspected on a kdump message: %s" % (VICTIM, reasons))


def kdump(make):
    d = make({"kdump": KDUMP}, hosts=4, servers_per_host=3,
             evacuation_time=0.3)
    servers, dump = _crash(d)
    d.wait_state(VICTIM, ("evacuated", "failed"), STEP_BUDGET)
    d.check(dump.join(STEP_BUDGET), "the dump kernel never finished")
    state, reason = d.state(VICTIM)
    d.check(state == "evacuated", "%s %s: %s" % (VICTIM, state, reason))
    d.check(dump.power_at_send and set(dump.power_at_send) == {"on"},
            "%s lost power during its dump (power at each message: %s)"
            % (VICTIM, dump.power_at_send))
    d.check(world.powered_off(d.cloud) == [VICTIM],
            "powered off: %s" % world.powered_off(d.cloud))
    _check_recovered(d, servers)
    fencing = [t["reason"] for t in d.journal.transitions()
               if t["host_name"] == VICTIM and t["dst"] == "fencing"]
    d.check(fencing and "dump is over" in fencing[0],
            "the power-off did not wait for the dump: %s" % fencing)
    d.check_safe()
    # Both from the last message, the instant the engine's [kdump]
    # timeout counts from: the decision to power off, then the BMC's Off.
    last = d.at("last message")
    decided = d.at(VICTIM + ":fencing") - last
    off = d.at(VICTIM + ":fenced") - last
    d.check(decided >= KDUMP["timeout"] - CLOCK_SLACK,
            "the power-off was decided %.2fs after the last fence_kdump "
            "message, before [kdump] timeout %gs" % (decided,
                                                     KDUMP["timeout"]))
    return ("%s left on while its dump ran (%d fence_kdump messages); "
            "power-off decided %.1fs after the last message ([kdump] "
            "timeout %gs, counted from it), Off confirmed %.1fs after it; "
            "%d/%d servers ACTIVE elsewhere"
            % (VICTIM, dump.sent, decided, KDUMP["timeout"], off,
               len(servers), len(servers)))


def kdump_trusted(make):
    d = make({"kdump": dict(KDUMP, action="evacuate")}, hosts=4,
             servers_per_host=3, evacuation_time=0.3)
    servers, dump = _crash(d)
    d.wait_state(VICTIM, ("evacuated", "failed"), STEP_BUDGET)
    state, reason = d.state(VICTIM)
    d.check(state == "evacuated", "%s %s: %s" % (VICTIM, state, reason))
    evacuated = d.at(VICTIM + ":evacuated")
    d.check(dump.join(STEP_BUDGET), "the dump kernel never finished")
    d.check(set(dump.power_at_send) == {"on"},
            "%s lost power during its dump" % VICTIM)
    d.check(world.powered_off(d.cloud) == [],
            "powered off: %s" % world.powered_off(d.cloud))
    _check_recovered(d, servers)
    steps = d.path(VICTIM)
    d.check("fencing" not in steps and "fenced" in steps,
            "%s went %s" % (VICTIM, " -> ".join(steps)))
    fences = [a for a in d.journal.actions() if a["kind"] == "fence"]
    d.check(not fences, "a power-off was asked: %s" % fences)
    fenced = d.at(VICTIM + ":fenced") - d.at("crash")
    return ("%s counted as fenced on its fence_kdump messages %.1fs after "
            "the crash, never powered off (its dump ran to its end), %d/%d "
            "servers ACTIVE elsewhere %.1fs after the crash"
            % (VICTIM, fenced, len(servers), len(servers),
               evacuated - d.at("crash")))
