"""Counts a process's glibc thread-arena heaps from /proc/<pid>/maps.

glibc maps each heap of a thread's own malloc arena as 64 MiB of address space aligned to
64 MiB: a read-write part as far as the heap has grown, the rest reserved without access (a
heap grown to the whole 64 MiB: one read-write mapping of it).
The main arena grows with brk and maps no such pair, so a process whose threads all use
the main arena shows none (imagegen/model/malloc_arena.py)."""

from itertools import pairwise
from pathlib import Path

HEAP_MAX = 64 * 2**20  # glibc's HEAP_MAX_SIZE on 64-bit: 2 x DEFAULT_MMAP_THRESHOLD_MAX


def _span(line: str) -> tuple[int, int]:
    start, end = line.split()[0].split("-")
    return int(start, 16), int(end, 16)


def _anonymous(line: str, perms: str) -> bool:
    fields = line.split()
    return fields[1] == perms and len(fields) == 5  # no path: not a file's mapping


def thread_heaps(pid: int | str = "self") -> int:
    return heaps_in(Path(f"/proc/{pid}/maps").read_text())


def heaps_in(maps: str) -> int:
    """The thread-arena heaps in the text of a /proc/<pid>/maps."""
    lines = maps.splitlines()
    heaps = 0
    for used, reserved in pairwise([*lines, "0-0 ---- 0 0:0 0"]):
        (start, end), (next_start, next_end) = _span(used), _span(reserved)
        if start % HEAP_MAX or not _anonymous(used, "rw-p"):
            continue
        grown = end - start == HEAP_MAX
        if grown or (
            end == next_start and next_end - start == HEAP_MAX and _anonymous(reserved, "---p")
        ):
            heaps += 1
    return heaps
