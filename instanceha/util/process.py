"""Is the process that wrote a file still there? Its pid, and the pid
namespace in which that pid means it."""

import os


def pid_namespace():
    """This process's pid namespace (``pid:[4026531836]``), or None where
    /proc does not say: a pid names the same process only within one (a
    CLI on the host reading the status file of an engine in a container
    sees other processes under that number)."""
    try:
        return os.readlink("/proc/self/ns/pid")
    except OSError:
        return None


def pid_alive(pid):
    """Is process ``pid`` there (in this pid namespace)?"""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True          # another user's: there
    return True
