"""Orderly shutdown drains first (issue 38), the agent's side, with a
fake logind: the inhibitor taken at start, PrepareForShutdown(true) ->
the signed request -> the engine's answer -> the lock released; the
bound; answers to no request of this shutdown ignored. Nothing sleeps:
waits advance a fake clock."""

import dataclasses

from structlog.testing import capture_logs

from instanceha import conf as ih_conf
from instanceha.agent import main as agent_main
from instanceha.agent import sender as sender_mod
from instanceha.agent import shutdown
from instanceha.engine import shutdown_drain
from instanceha.fsm.record import HostRecord
from instanceha.fsm.states import State as S
from instanceha.heartbeat import keys
from instanceha.heartbeat import protocol
from instanceha.sources import heartbeat
from tests.unit.agent import helpers
from tests.unit.sources.helpers import Sink

MASTER = keys.Key.from_secret(b"M" * 40)
HOST_KEY = keys.derive_host_key(MASTER, "compute-1")
RING = keys.Keyring(HOST_KEY)
WALL = 1_800_000_000.0


class FakeLogind(shutdown.Logind):
    """logind's interface: locks are numbers, ``fire(start)`` is the
    PrepareForShutdown signal."""

    def __init__(self, delay_max=None, fail=None):
        self.calls = []
        self.on_prepare = None
        self._next = 100
        self._delay_max = delay_max
        self.fail = fail
        self.closed = False

    def inhibit(self, what, who, why, mode):
        if self.fail is not None:
            raise shutdown.LogindError(self.fail)
        self.calls.append((what, who, why, mode))
        self._next += 1
        return self._next

    def delay_max(self):
        return self._delay_max

    def watch(self, on_prepare):
        self.on_prepare = on_prepare

    def fire(self, start=True):
        return self.on_prepare(start)

    def close(self):
        self.closed = True


class Clocks:
    """A monotonic clock and a wall clock moved together by waits."""

    def __init__(self):
        self.mono = 50.0

    def monotonic(self):
        return self.mono

    def wall(self):
        return WALL + self.mono

    def wait(self, event, seconds):
        if not event.is_set():
            self.mono += seconds
        return event.is_set()


def make(answer=None, timeout=30.0, logind=None, resend=1.0):
    """A ShutdownDrain whose sends go to ``answer(request)`` (returns the
    engine's answer datagram, or None)."""
    clocks = Clocks()
    sent, closed = [], []
    drain = None

    def send(data):
        request = protocol.decode(data, RING)
        sent.append(request)
        reply = answer(request) if answer else None
        if reply is not None:
            drain.on_answer(protocol.decode(reply, RING))
    drain = shutdown.ShutdownDrain(
        logind or FakeLogind(), RING, "compute-1", send, clocks.wall,
        timeout, resend=resend, monotonic=clocks.monotonic,
        wait=clocks.wait, close_fd=closed.append)
    return drain, sent, closed, clocks


def status(request, text):
    return protocol.encode_request(protocol.Request(
        kind=protocol.DRAIN_STATUS, host="compute-1", seq=request.seq,
        sent_at=request.sent_at, reason=text), HOST_KEY)


def test_the_lock_is_taken_at_start_as_a_delay_on_shutdown():
    logind = FakeLogind()
    drain, sent, closed, _ = make(logind=logind)
    assert drain.start() is True
    assert logind.calls == [("shutdown", "instanceha-agent",
                             "drain servers before shutdown", "delay")]
    assert drain.fd == 101 and logind.on_prepare is not None
    assert not sent and not closed


def test_prepare_for_shutdown_asks_waits_for_drained_then_releases():
    answers = iter(["draining: drain asked", "draining: servers moving off",
                    "drained: in maintenance"])
    logind = FakeLogind()
    drain, sent, closed, clocks = make(
        lambda req: status(req, next(answers)), logind=logind)
    drain.start()
    with capture_logs() as logs:
        assert logind.fire(True) == shutdown.DRAINED
    assert [r.kind for r in sent] == [protocol.DRAIN_HOST] * 3
    assert all(r.host == "compute-1" for r in sent)
    seqs = [r.seq for r in sent]
    assert seqs == sorted(set(seqs))       # each new, increasing
    assert closed == [101] and drain.fd is None
    assert drain.outcomes == [(shutdown.DRAINED, 2.0)]
    assert any(e["event"] == "agent.shutdown_drained" for e in logs)


def test_no_answer_releases_at_the_bound_and_says_so():
    drain, sent, closed, clocks = make(timeout=10.0)
    drain.start()
    with capture_logs() as logs:
        assert drain.logind.fire(True) == shutdown.TIMED_OUT
    assert len(sent) == 10           # asked again every second
    assert closed == [101]
    assert drain.outcomes == [(shutdown.TIMED_OUT, 10.0)]
    (line,) = [e for e in logs if e["event"] == "agent.shutdown_not_drained"]
    assert line["outcome"] == "timed_out" and "anyway" in line["reason"]


def test_a_refusal_releases_at_once():
    drain, sent, closed, _ = make(
        lambda req: status(req, "refused: host in state suspended"))
    drain.start()
    assert drain.logind.fire(True) == shutdown.REFUSED
    assert len(sent) == 1 and closed == [101]


def test_an_answer_to_no_request_of_this_shutdown_is_not_taken():
    # A recorded "drained" of an earlier shutdown, replayed: its seq is
    # not one this shutdown sent.
    old = []

    def answer(request):
        if not old:
            old.append(request)
            return status(request._replace(seq=request.seq - 1),
                          "drained: in maintenance")
        return None
    drain, sent, closed, _ = make(answer, timeout=5.0)
    drain.start()
    assert drain.logind.fire(True) == shutdown.TIMED_OUT
    other_host = protocol.Request(protocol.DRAIN_STATUS, "compute-2",
                                  sent[0].seq, WALL, "drained: x")
    assert drain.on_answer(other_host) == shutdown.UNASKED
    assert drain.on_answer(sent[-1]._replace(
        kind=protocol.DRAIN_STATUS, reason="nonsense")) == shutdown.UNASKED


def test_a_cancelled_shutdown_takes_the_lock_again():
    drain, sent, closed, _ = make(timeout=2.0)
    drain.start()
    drain.logind.fire(True)
    assert drain.fd is None
    drain.logind.fire(False)
    assert drain.fd == 102
    drain.stop()
    assert closed == [101, 102] and drain.logind.closed


def test_the_wait_is_capped_by_loginds_inhibit_delay_max():
    drain, sent, closed, _ = make(timeout=300.0,
                                  logind=FakeLogind(delay_max=5.0))
    with capture_logs() as logs:
        drain.start()
    assert drain.timeout == 5.0
    assert any(e["event"] == "agent.shutdown_drain_capped" for e in logs)
    assert drain.logind.fire(True) == shutdown.TIMED_OUT
    assert len(sent) == 5


def test_logind_unreachable_is_logged_and_the_agent_goes_on():
    drain, _, _, _ = make(logind=FakeLogind(fail="no system bus"))
    with capture_logs() as logs:
        assert drain.start() is False
    assert drain.fd is None
    assert any(e["event"] == "agent.shutdown_inhibitor_not_taken"
               for e in logs)


# -- agent and engine, through the protocol -----------------------------------

def test_agent_and_engine_drain_the_host_then_the_lock_is_released():
    """The agent's sender and an engine's listener joined by fake
    sockets: the request is verified, becomes the drain, the answers
    come back on the path socket."""
    hosts = [("id-1", "compute-1"), ("id-2", "compute-2")]
    engine_rec = {"rec": HostRecord(id="id-1", name="compute-1",
                                    state=S.ACTIVE)}
    submitted = []

    def submit(event):
        submitted.append(event)
        engine_rec["rec"] = dataclasses.replace(engine_rec["rec"],
                                                state=S.DRAINING)
    drains = shutdown_drain.ShutdownDrains(
        lambda name: engine_rec["rec"] if name == "compute-1" else None,
        submit)
    clocks = Clocks()
    agent_sender = None

    def engine_sendto(via, data, address):
        agent_sender.handle_reply(data, "%s:%d" % address)
    src = heartbeat.HeartbeatSource(
        ih_conf.make({"agent": {"listen_addresses": ["127.0.0.1:0"]}}),
        Sink(), clocks.wall, lambda: list(hosts),
        keyring=keys.HostKeyring(MASTER), sendto=engine_sendto,
        drain_sink=drains.ask)
    src.refresh(clocks.wall())
    sockets = helpers.Sockets()
    conf = helpers.make_conf(drain_on_shutdown=True,
                             shutdown_drain_timeout=60.0)
    agent_sender = sender_mod.Sender(
        conf, RING, clocks.wall, lambda: protocol.UNKNOWN_FACTS, sockets,
        host="compute-1", boot_id="boot-1", monotonic=clocks.monotonic,
        seq_start=1, resolver=helpers.resolver)
    logind = FakeLogind()
    drain = shutdown.ShutdownDrain(
        logind, RING, "compute-1", agent_sender.send_every_path,
        agent_sender.sent_at, 60.0, monotonic=clocks.monotonic,
        wait=clocks.wait, close_fd=lambda fd: None)
    agent_sender.on_drain_answer = drain.on_answer

    recorded = []

    def wait(event, seconds):
        # The datagrams the agent sent reach the engine; 20 s in, the
        # drain is done.
        for sock in sockets.made:
            for data, _ in sock.sent:
                recorded.append(data)
                src.handle_datagram(data, ("192.0.2.50", 40000),
                                    now=clocks.wall())
            sock.sent.clear()
        if clocks.mono >= 70.0:
            engine_rec["rec"] = dataclasses.replace(engine_rec["rec"],
                                                    state=S.MAINTENANCE)
        return clocks.wait(event, seconds)
    drain._wait = wait
    drain.start()
    assert logind.fire(True) == shutdown.DRAINED
    assert len(submitted) == 1 and drain.fd is None
    assert drain.outcomes[0][1] <= 22.0
    assert agent_sender.replies[sender_mod.DRAIN_ANSWER] >= 2
    # A recorded request replayed later asks nothing more: the host,
    # back in service, is not drained again by it.
    engine_rec["rec"] = dataclasses.replace(engine_rec["rec"],
                                            state=S.ACTIVE)
    answered = agent_sender.replies[sender_mod.DRAIN_ANSWER]
    src.handle_datagram(recorded[0], ("192.0.2.50", 40000),
                        now=clocks.wall())
    assert src.health()["dropped"]["replayed"] == 1
    assert len(submitted) == 1
    assert agent_sender.replies[sender_mod.DRAIN_ANSWER] == answered


def test_the_agent_wires_the_drain_only_when_asked(tmp_path):
    conf = helpers.make_conf(drain_on_shutdown=True)
    logind = FakeLogind()
    agent = agent_main.Agent(
        conf, RING, host="compute-1", logind=logind,
        reader=type("R", (), {"compute_unit": "nova-compute.service",
                              "read": lambda self: protocol.UNKNOWN_FACTS})(),
        socket_factory=helpers.Sockets(), resolver=helpers.resolver,
        boot_id="boot-1")
    assert agent.sender.on_drain_answer == agent.shutdown.on_answer
    agent.start()
    assert logind.calls and agent.shutdown.fd == 101
    agent.control.stop()
    plain = agent_main.Agent(
        helpers.make_conf(), RING, host="compute-1",
        socket_factory=helpers.Sockets(), resolver=helpers.resolver,
        boot_id="boot-1")
    assert plain.shutdown is None and plain.sender.on_drain_answer is None
