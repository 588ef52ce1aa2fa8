"""The generating thread's CPU priority (GEN_NICE).

On a 2-4 vCPU host a generation keeps every core busy with torch's threads. A todo or status
request that wakes meanwhile waited for a core behind them, and that wait was most of its p99
during a generation (bench/todos_bench.py --during-generation). Linux keeps a nice value per
thread and a new thread starts with its creator's, so the generating thread lowers its own
before its first torch call, and the threads torch starts for it follow. A request thread then
gets a core as soon as it wakes, while a generation alone still has every core: a nice value
only orders work that waits for a core.
"""

import logging
import os
import threading

log = logging.getLogger(__name__)

LOWEST = 19  # the largest nice value Linux accepts


def lower_this_thread(by: int) -> None:
    """Runs the calling thread (and threads it starts from now on) `by` nice values below
    where it runs now, at most at the lowest priority. Relative, so a service started under
    `nice` keeps its order; raising a nice value needs no privilege, lowering it back would."""
    if by <= 0:
        return
    thread = threading.get_native_id()
    try:
        now = os.getpriority(os.PRIO_PROCESS, thread)
        os.setpriority(os.PRIO_PROCESS, thread, min(LOWEST, now + by))
    except OSError as exc:  # e.g. a seccomp profile that refuses it: generate at the same priority
        log.warning("GEN_NICE: the generating thread keeps its priority: %s", exc)
