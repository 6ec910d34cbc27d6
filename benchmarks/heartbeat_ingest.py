#!/usr/bin/env python3
"""CPU of the engine's heartbeat source taking beats from many hosts
(issue 23: 5,000 hosts at one beat a second for under 10 % of one core).

A sender process sends one beat per host per second (signed beforehand:
in a cloud the senders are other machines) to the source's loopback
socket, spread evenly over each second. This process runs the real
``HeartbeatSource`` (its receiver thread, its periodic silence check)
with a counting sink. After
a warm-up (the first beat of every host makes an event), this process's
user + system CPU time over ``--seconds`` is printed as a share of one
core, with what the sender sent, what the source received and accepted,
its drops by reason, and the events made during the measurement (a
steady fleet should make none), and what verifying and decoding one
datagram costs alone (the protocol's share). The machine's other work
shows in the figure: on a busy machine each datagram costs more CPU
time (caches shared, cores contended); run it several times.

    .venv/bin/python benchmarks/heartbeat_ingest.py [--hosts 5000]
        [--seconds 20] [--paths 1]
"""

import argparse
import collections
import multiprocessing
import os
import resource
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from instanceha import conf as ih_conf  # noqa: E402
from instanceha import log  # noqa: E402
from instanceha.heartbeat import keys  # noqa: E402
from instanceha.heartbeat import protocol  # noqa: E402
from instanceha.sources import heartbeat  # noqa: E402

SECRET = b"benchmark-secret-" * 3
#: The engine's challenge nonce in this benchmark: the same at every
#: draw (the source's random source is replaced), so that beats signed
#: beforehand echo it and are proven, as a live agent's are. The source
#: still sends every host its challenges, whose cost is measured too.
NONCE = b"\x01" * 16
BATCHES_PER_SECOND = 50


def encode_all(hosts, paths, seconds, start, host_keys=False):
    """Every datagram of the run, signed beforehand: [second][datagram].
    In a real cloud the senders are other machines; signing here while
    measuring would take CPU from the source on the same cores.
    ``host_keys``: each host signs with its own key, derived from the
    master (issue 34), instead of the shared key."""
    key = keys.Key.from_secret(SECRET)
    names = ["compute-%05d" % i for i in range(hosts)]
    own = {name: keys.derive_host_key(key, name) if host_keys else key
           for name in names}
    return [[protocol.encode_beat(protocol.Beat(
        host=name, boot_id="boot-" + name, seq=second + 1,
        sent_at=start + second, path="p%d" % p,
        facts=protocol.Facts(True, True, 4), echoes=(NONCE,)), own[name])
        for name in names for p in range(paths)]
        for second in range(seconds)]


def send(port, datagrams, sent, ready):
    """The sender process: each second's datagrams spread evenly over
    the second, in batches."""
    import socket
    out = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    target = ("127.0.0.1", port)
    count = 0
    ready.set()
    start = time.monotonic()
    for second, batch in enumerate(datagrams):
        per_batch = max(1, len(batch) // BATCHES_PER_SECOND)
        for b in range(0, len(batch), per_batch):
            delay = start + second + b / len(batch) - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            for data in batch[b:b + per_batch]:
                out.sendto(data, target)
                count += 1
    sent.value = count


def cpu():
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--hosts", type=int, default=5000)
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--warmup", type=float, default=3.0)
    parser.add_argument("--paths", type=int, default=1)
    parser.add_argument("--host-keys", action="store_true",
                        help="each host its own key, derived from a master "
                             "key (the engine derives them when it reads "
                             "the host list), instead of the shared key")
    args = parser.parse_args()
    # The service's logging (INFO, to stderr): a log call made per beat
    # would be counted as the service would pay it.
    log.setup("console", False)

    conf = ih_conf.make({"agent": {"listen_addresses": ["127.0.0.1:0"]}})
    events = collections.Counter()
    known = [("id-%05d" % i, "compute-%05d" % i) for i in range(args.hosts)]
    secret = keys.Key.from_secret(SECRET)
    ring = (keys.HostKeyring(secret) if args.host_keys
            else keys.Keyring(secret))
    source = heartbeat.HeartbeatSource(
        conf, lambda e: events.update([e.kind.value]),
        known_hosts=lambda: list(known), keyring=ring,
        random=lambda size: NONCE[:size].ljust(size, b"\x01"))
    c0 = time.process_time()
    source.start()
    if args.host_keys:
        print("start, with every host's key derived: %.2f s of CPU"
              % (time.process_time() - c0))
    (_, port), = source.bound
    sent = multiprocessing.Value("q", 0)
    total = int(args.warmup + args.seconds) + 2
    print("signing %d datagrams beforehand..." % (
        total * args.hosts * args.paths))
    datagrams = encode_all(args.hosts, args.paths, total, time.time() + 1,
                           args.host_keys)
    ctx = multiprocessing.get_context("fork")
    ready = ctx.Event()
    sender = ctx.Process(target=send, args=(port, datagrams, sent, ready))
    sender.start()
    ready.wait()
    del datagrams
    time.sleep(args.warmup)
    before = dict(source.health(), events=sum(events.values()))
    cpu0, t0 = cpu(), time.monotonic()
    time.sleep(args.seconds)
    cpu1, t1 = cpu(), time.monotonic()
    after = dict(source.health(), events=sum(events.values()))
    sender.join()
    time.sleep(0.5)
    final = source.health()
    source.stop()

    share = 100.0 * (cpu1 - cpu0) / (t1 - t0)
    received = after["received"] - before["received"]
    print("hosts %d x %d path(s) at 1 beat/s, measured over %.1f s"
          % (args.hosts, args.paths, t1 - t0))
    print("source CPU: %.2f %% of one core (target < 10 %%); %.1f us per "
          "datagram received" % (share, 1e6 * (cpu1 - cpu0)
                                 / max(received, 1)))
    print("datagrams received during the measurement: %d (%.0f/s)"
          % (received, received / (t1 - t0)))
    print("in all: sent %d, received %d, accepted %d, lost before the "
          "source (kernel buffer) %d" % (
              sent.value, final["received"], final["accepted"],
              sent.value - final["received"]))
    sample = encode_all(min(args.hosts, 5000), 1, 1, time.time(),
                        args.host_keys)[0]
    ring = source.keyring
    c0 = time.process_time()
    for data in sample:
        protocol.decode_signed(data, ring)
    print("of which verifying and decoding (protocol.decode_signed, "
          "in a loop): %.1f us per datagram"
          % (1e6 * (time.process_time() - c0) / len(sample)))
    print("dropped by the source, by reason: %s"
          % (final["dropped"] or "none"))
    print("events: %d during the measurement; in all %s"
          % (after["events"] - before["events"], dict(events)))
    print("hosts beating %d, silent %d (after the sender stopped); "
          "unproven beats %d; challenges sent %d (failed %d)"
          % (final["hosts_beating"], final["hosts_silent"],
             final["beats_unproven"], final["challenges_sent"],
             final["challenge_errors"]))


if __name__ == "__main__":
    main()
