"""Loaded by a test's app process (PYTHONPATH): file locks under NO_LOCKS_UNDER fail, as they
do on an SMB share, and every attempt is written to NO_LOCKS_LOG."""

import errno
import fcntl
import os

_root = os.environ.get("NO_LOCKS_UNDER")
_log = os.environ.get("NO_LOCKS_LOG")


def _path_of(fd) -> str:
    number = fd if isinstance(fd, int) else fd.fileno()
    try:
        return os.readlink(f"/proc/self/fd/{number}")
    except OSError:
        return ""


def _refusing(original):
    def lock(fd, *args, **kwargs):
        path = _path_of(fd)
        if path.startswith(_root):
            with open(_log, "a") as log:
                log.write(f"{original.__name__} {path}\n")
            raise OSError(errno.ENOLCK, "No locks available", path)
        return original(fd, *args, **kwargs)

    return lock


if _root and _log:
    fcntl.flock = _refusing(fcntl.flock)
    fcntl.lockf = _refusing(fcntl.lockf)
    with open(_log, "a") as log:
        log.write("active\n")
