"""One malloc arena for the processes that generate (gunicorn's worker; manage.py's commands).

glibc gives each allocating thread its own arena of 64 MiB heaps. It hands those back to the
kernel as they empty. The main thread's heap keeps freed pages for reuse instead. The service
generates in a worker thread (imagegen.generation.jobs). There SDXL's activations were faulted
in fresh again and again. One 1024x1024 one-step request took 19 M minor faults and 49 s of
kernel time. Plain diffusers on its main thread took 4-8 M and 8-18 s, with the same user CPU.
The service's decode took 1.20-1.31x plain's. With MALLOC_ARENA_MAX=1 it faulted 2.6 M times
and decoded in plain's time. With this call, in a later run, the decode took 0.94x plain's
(docs/performance.md, "Why the service's full decode was slower").

The cost: the main arena keeps what it frees, so peak RSS was 1.17x the fp32 weights, not
1.13x. The worker's threads also share one arena lock. Python's allocator serves small objects
without malloc, and generation allocates few large blocks. The lock's cost was not measured.

Set `MALLOC_ARENA_MAX`, or `glibc.malloc.arena_max` in `GLIBC_TUNABLES`, to choose otherwise.
The service then leaves malloc as glibc configured it."""

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

    Call it before starting threads: a thread keeps an arena it already has. An ended thread's
    arena passes to the next one. Does nothing without glibc, or when the operator chose."""
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
