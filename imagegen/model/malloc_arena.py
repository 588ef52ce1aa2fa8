"""One malloc arena for the processes that generate (gunicorn's worker; manage.py's commands).

glibc gives each thread its own arena, which hands emptied heaps back to the kernel. The
service generates in a worker thread, so SDXL's activations were faulted in afresh each time.
One 1024x1024 request took 19 M minor faults and 49 s of kernel time. With one arena it
faulted 2.6 M times, and the decode took 0.94x plain diffusers' (docs/performance.md, "Why the
service's full decode was slower"). The cost: peak RSS 1.17x the fp32 weights, not 1.13x.

Set `MALLOC_ARENA_MAX`, or `glibc.malloc.arena_max` in `GLIBC_TUNABLES`, to choose otherwise."""

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
    """Makes threads that allocate from now on use the main arena; True when it did.

    Call it before starting threads: a thread keeps an arena it has. Needs glibc and no
    operator choice."""
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
