"""The generating thread's CPU priority (GEN_NICE), so requests get a core first.

Linux keeps a nice value per thread and new threads inherit it. So the generating thread
lowers its own first, and torch's threads follow."""

import logging
import os
import threading

log = logging.getLogger(__name__)

LOWEST = 19  # the largest nice value Linux accepts


def lower_this_thread(by: int) -> None:
    """Lowers this thread's priority by `by` nice values, capped at the lowest.

    Relative, so a service started under `nice` keeps its order. Raising it back would need
    privilege."""
    if by <= 0:
        return
    thread = threading.get_native_id()
    try:
        now = os.getpriority(os.PRIO_PROCESS, thread)
        os.setpriority(os.PRIO_PROCESS, thread, min(LOWEST, now + by))
    except OSError as exc:  # e.g. a seccomp profile that refuses it: generate at the same priority
        log.warning("GEN_NICE: the generating thread keeps its priority: %s", exc)
