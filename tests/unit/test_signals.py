"""``instanceha run`` hears every SIGHUP and SIGTERM, whichever of its
threads the kernel hands the signal to, and a SIGHUP that arrives while a
reload runs leads to one more reload after it.

The kernel delivers a signal sent to a process to any thread that does not
block it; CPython's C handler then only marks it, and a main thread blocked
on a lock does not wake up. ``signal.pthread_kill`` on a thread other than
the main one does deterministically what the kernel did now and then in
the flaky functional test (functional/sim/test_fencing_methods.py)."""

import signal
import threading

import pytest

from instanceha import service as service_mod
from instanceha.cmd import main as cli

#: Budget for one signal to be acted on; generous for a loaded machine.
BUDGET = 5.0


class FakeService:
    """What ``run`` drives: start, reload (optionally held), stop."""

    def __init__(self):
        self.started = threading.Event()
        self.reloads = 0
        self.reloaded = threading.Condition()
        self.hold = None            # an Event the next reload waits for
        self.in_reload = threading.Event()
        self.mu = threading.Lock()
        self.stopped = threading.Event()

    def start(self):
        self.started.set()

    def reload(self):
        self.in_reload.set()
        hold, self.hold = self.hold, None
        if hold is not None:
            hold.wait(BUDGET)
        with self.reloaded:
            self.reloads += 1
            self.reloaded.notify_all()

    def wait_reloads(self, n):
        with self.reloaded:
            return self.reloaded.wait_for(lambda: self.reloads >= n, BUDGET)

    def stop(self):
        with self.mu:
            self.stopped.set()


@pytest.fixture
def run(tmp_path, monkeypatch):
    """run(scenario): ``instanceha run`` in this (the main) thread on a
    FakeService; ``scenario(svc, main_thread_id)`` runs on another thread
    and must end with a SIGTERM. Returns (exit code, svc, scenario's
    result)."""
    conf = tmp_path / "instanceha.conf"
    conf.write_text("[DEFAULT]\nstatus_file =\n")
    monkeypatch.setattr("instanceha.log.setup", lambda *a, **k: None)
    monkeypatch.setattr("instanceha.runtime.freeze_startup_heap",
                        lambda *a: 0)
    # The service is a fake: so are its start-up checks (the machine's
    # inventory and /run/instanceha are not this test's).
    monkeypatch.setattr("instanceha.service.preflight.run",
                        lambda conf: [])
    before = {s: signal.getsignal(s) for s in
              (signal.SIGHUP, signal.SIGTERM, signal.SIGINT)}

    def go(scenario):
        svc = FakeService()
        monkeypatch.setattr(service_mod, "Service", lambda conf, **kw: svc)
        main_id = threading.get_ident()
        result = []

        def helper():
            try:
                assert svc.started.wait(BUDGET)
                result.append(scenario(svc, main_id))
            finally:
                # Never once run() ended: its handlers are put back then.
                with svc.mu:
                    if not svc.stopped.is_set():
                        signal.pthread_kill(main_id, signal.SIGTERM)
        t = threading.Thread(target=helper, daemon=True)
        t.start()
        code = cli.main(["run", "--config-file", str(conf)])
        t.join(BUDGET)
        return code, svc, result[0] if result else None
    yield go
    restored = {s: signal.getsignal(s) for s in before}
    for s, handler in before.items():
        signal.signal(s, handler)
    assert restored == before, "run() left its signal handlers installed"


def test_a_sighup_delivered_to_another_thread_reloads_at_once(run):
    """Each SIGHUP lands on a worker thread while the main loop waits;
    before the fix the main thread slept on through it (no reload until
    the next signal, and that was the SIGTERM, so never)."""
    def scenario(svc, main_id):
        for n in range(1, 21):
            signal.pthread_kill(threading.get_ident(), signal.SIGHUP)
            if not svc.wait_reloads(n):
                return n - 1
        return 20
    code, svc, reloads = run(scenario)
    assert code == 0 and svc.stopped.is_set()
    assert reloads == 20, "only %s of 20 SIGHUPs reloaded" % reloads


def test_a_sighup_during_a_reload_reloads_again_after_it(run):
    """Coalesced, not lost: three SIGHUPs while the first reload runs
    give one more reload, which reads the files again after the first."""
    def scenario(svc, main_id):
        hold = threading.Event()
        svc.hold = hold
        signal.pthread_kill(main_id, signal.SIGHUP)
        assert svc.in_reload.wait(BUDGET)
        for _ in range(3):
            signal.pthread_kill(threading.get_ident(), signal.SIGHUP)
        hold.set()
        return svc.wait_reloads(2)
    code, svc, second = run(scenario)
    assert second, "no reload after the one the SIGHUPs arrived in"
    assert svc.reloads == 2


def test_a_sigterm_delivered_to_another_thread_stops_the_service(run):
    """Before the fix a SIGTERM could wait as long as a SIGHUP: systemd's
    stop then ran into TimeoutStopSec and a SIGKILL."""
    def scenario(svc, main_id):
        signal.pthread_kill(threading.get_ident(), signal.SIGTERM)
        return svc.stopped.wait(BUDGET)
    code, svc, stopped_by_it = run(scenario)
    assert code == 0
    assert stopped_by_it, "the SIGTERM did not stop the service"
