"""instanceha runs on native threads: oslo.service's threading backend is
selected before oslo.messaging is imported, and eventlet is never loaded,
not even by the libraries that import it whenever it is installed
(futurist, under oslo.messaging and tooz)."""

import subprocess
import sys
import textwrap


def _run(code):
    out = subprocess.run([sys.executable, "-c", textwrap.dedent(code)],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-3000:]
    return out


def test_listener_and_coordinator_run_without_eventlet():
    """A fresh process: import instanceha, run an oslo.messaging
    notification listener (threading executor) and a tooz coordinator;
    no eventlet module is loaded and nothing warns about it."""
    out = _run("""
        import sys
        import instanceha
        from instanceha import backend
        import oslo_messaging
        from oslo_config import cfg
        from oslo_service import backend as svc_backend
        from tooz import coordination

        conf = cfg.ConfigOpts()
        conf([], project="x")
        transport = oslo_messaging.get_notification_transport(
            conf, url="fake://")
        class Endpoint:
            def info(self, *args):
                pass
        listener = oslo_messaging.get_notification_listener(
            transport, [oslo_messaging.Target(topic="versioned")],
            [Endpoint()], executor="threading")
        listener.start()
        coord = coordination.get_coordinator("file:///tmp/iha-no-eventlet",
                                             b"m")
        coord.start()
        coord.stop()
        listener.stop()
        listener.wait()
        print("backend", svc_backend.get_backend_type().value)
        print("loaded", backend.loaded())
    """)
    assert "backend threading" in out.stdout, out.stdout
    assert "loaded []" in out.stdout, out.stdout
    assert "Eventlet" not in out.stderr, out.stderr


def test_importing_instanceha_blocks_eventlet_and_selects_threads():
    out = _run("""
        import sys
        import instanceha
        from oslo_service import backend
        try:
            import eventlet
        except ImportError:
            print("eventlet refused")
        print(backend.get_backend_type().value)
    """)
    assert out.stdout.split() == ["eventlet", "refused", "threading"]


def test_another_backend_already_chosen_is_a_clear_error():
    out = subprocess.run([sys.executable, "-c", textwrap.dedent("""
        from oslo_service import backend
        backend.init_backend(backend.BackendType.EVENTLET)
        import instanceha
    """)], capture_output=True, text=True, timeout=120)
    assert out.returncode != 0
    assert "instanceha needs the threading backend" in out.stderr
