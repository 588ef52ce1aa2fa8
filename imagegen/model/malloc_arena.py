"""One malloc arena for the processes that generate (gunicorn's worker; manage.py's commands).

Why: glibc gives each new thread that allocates its own malloc arena, made of 64 MiB heaps
that it unmaps or shrinks back to the kernel as they empty, where the main thread's one heap
keeps its freed pages for the next allocation. The service generates in a thread of its
worker (imagegen.generation.jobs), beside the worker's request threads; there, SDXL's
activations were faulted in fresh again and again: 19 M minor page faults and 49 s of kernel
time for one 1024x1024 request with one step, against plain diffusers' 4-8 M and 8-18 s on
its main thread, the same user CPU time: the service's decode 1.20-1.31x plain's in that series.
With MALLOC_ARENA_MAX=1 the same request faulted 2.6 M times and decoded in plain's time; with
this call, in a later run, the decode took 0.94x plain's (docs/performance.md, "Why the
service's full decode was slower").

What it costs: the main arena keeps what it frees, so the request's peak RSS was 1.17x the
fp32 weights instead of 1.13x; and the worker's threads share one arena's lock (Python's own
allocator serves small objects without malloc; the generation's allocations are few and
large; the lock's cost was not measured).

Set `MALLOC_ARENA_MAX` (glibc's own variable, or `glibc.malloc.arena_max` in
`GLIBC_TUNABLES`) to choose otherwise: the service then leaves malloc as glibc configured it.
"""

import ctypes
import logging
import os
import platform

log = logging.getLogger(__name__)

M_ARENA_MAX = -8  # glibc's malloc.h


def operator_chose() -> bool:
    """Whether this process's environment sets the arena count itself (glibc reads it)."""
    tunables = os.environ.get("GLIBC_TUNABLES", "")
    return os.environ.get("MALLOC_ARENA_MAX") is not None or "glibc.malloc.arena_max" in tunables


def use_one_arena() -> bool:
    """Makes threads that allocate from now on use the main arena; True when it did. Call it
    before the process starts threads: a thread that already has an arena keeps it, and an
    arena left by an ended thread is handed to the next one. Does nothing where the C library
    is not glibc or the environment chose (operator_chose)."""
    if operator_chose():
        return False
    if platform.libc_ver()[0] != "glibc":  # musl and others: their allocator's rules stand
        return False
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    if not mallopt(M_ARENA_MAX, 1):
        log.warning("malloc did not take M_ARENA_MAX=1; threads keep arenas of their own")
        return False
    return True
