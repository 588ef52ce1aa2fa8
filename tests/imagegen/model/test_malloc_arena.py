"""One malloc arena in the processes that generate (imagegen/model/malloc_arena.py): the
generating thread's own arena handed SDXL's freed activations back to the kernel and faulted
them in again, the decode 1.20-1.31x plain diffusers' time (docs/performance.md; the time is
bench/time_to_image_bench.py's to measure). Read here from the processes' memory maps: a
thread arena's heaps are 64 MiB mappings the main arena never makes
(tests/support/malloc_heaps.py)."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import requests

from imagegen.model import malloc_arena
from tests.support.malloc_heaps import heaps_in, thread_heaps
from tests.support.model_service import MODES, ready_in_mode
from tests.support.processes import ROOT, AppServer
from tests.support.xdist_schedule import stack_of

# Four threads that each allocate 1 MiB eight times and hold it while the maps are read: a
# thread's first malloc gives it an arena (and its first heap), whatever the block's size.
PROBE = """
import ctypes, json, sys, threading
from imagegen.model.malloc_arena import use_one_arena
from tests.support.malloc_heaps import thread_heaps

applied = use_one_arena() if sys.argv[1] == "apply" else None
libc = ctypes.CDLL(None)
libc.malloc.restype = ctypes.c_void_p
allocated, done = threading.Barrier(5), threading.Event()

def hold():
    blocks = [libc.malloc(1 << 20) for _ in range(8)]
    allocated.wait()
    done.wait()

threads = [threading.Thread(target=hold) for _ in range(4)]
for thread in threads:
    thread.start()
allocated.wait()
print(json.dumps({"applied": applied, "heaps": thread_heaps()}))
done.set()
"""


def probe(how: str, **env: str) -> dict:
    environment = {k: v for k, v in os.environ.items()
                   if k not in ("MALLOC_ARENA_MAX", "GLIBC_TUNABLES")}  # fmt: skip
    out = subprocess.run(
        [sys.executable, "-c", PROBE, how], cwd=ROOT, env={**environment, **env},
        capture_output=True, text=True, timeout=60, check=True,
    )  # fmt: skip
    return json.loads(out.stdout)


def test_threads_started_after_it_allocate_from_the_main_arena():
    assert probe("leave") == {"applied": None, "heaps": 4}  # glibc's default: one arena each
    assert probe("apply") == {"applied": True, "heaps": 0}


@pytest.mark.parametrize(
    "env", [{"MALLOC_ARENA_MAX": "2"}, {"GLIBC_TUNABLES": "glibc.malloc.arena_max=2"}],
    ids=["MALLOC_ARENA_MAX", "GLIBC_TUNABLES"],
)  # fmt: skip
def test_an_arena_count_the_environment_sets_is_left_to_glibc(env):
    # Two arenas: the main one and one the four threads share.
    assert probe("apply", **env) == {"applied": False, "heaps": 1}


def generating_pid(request: pytest.FixtureRequest, mode: str, app: AppServer) -> int:
    """In process, gunicorn's one worker; distributed, the shared stack's worker."""
    if mode == "in-process":
        master = app.process.pid
        (child,) = Path(f"/proc/{master}/task/{master}/children").read_text().split()
        return int(child)
    (worker,) = stack_of(request).workers
    return worker.process.pid


def heaps_after_a_generation(request, mode, hub_root, tmp_path, **env: str) -> int:
    with ready_in_mode(request, mode, hub_root, tmp_path, **env) as app:
        fields = {"prompt": "one arena", "size": "128x128", "steps": "2", "seed": "1"}
        response = requests.post(app.url("/generate"), data=fields, timeout=120)
        assert response.status_code == 200, response.text
        assert requests.get(app.url("/health"), timeout=10).status_code == 200
        return thread_heaps(generating_pid(request, mode, app))


@pytest.mark.parametrize("mode", MODES)
def test_the_process_that_generates_keeps_its_threads_on_the_main_arena(
    request, mode, hub_root, tmp_path
):
    assert heaps_after_a_generation(request, mode, hub_root, tmp_path) == 0


def test_a_worker_told_its_arena_count_keeps_glibcs_arenas(request, hub_root, tmp_path):
    """The operator's MALLOC_ARENA_MAX reaches the gunicorn worker untouched; and the count
    above sees the arenas of a worker that has them."""
    heaps = heaps_after_a_generation(
        request, "in-process", hub_root, tmp_path, MALLOC_ARENA_MAX="8"
    )
    assert heaps > 0


def test_the_heap_count_sees_growing_and_grown_heaps_and_nothing_else():
    maps = "\n".join([
        "7f0000000000-7f0000021000 rw-p 00000000 00:00 0",  # a heap grown 132 KiB
        "7f0000021000-7f0004000000 ---p 00000000 00:00 0",  # and the rest of its 64 MiB
        "7f0004000000-7f0008000000 rw-p 00000000 00:00 0",  # a heap grown to all 64 MiB
        "7f0008000000-7f000c000000 rw-p 00000000 08:01 42 /models/unet.bin",  # a file's
        "7f000c001000-7f0010001000 rw-p 00000000 00:00 0",  # 64 MiB, not aligned to it
        "7f0014000000-7f0014100000 rw-p 00000000 00:00 0",  # aligned, 1 MiB, nothing after
    ])  # fmt: skip
    assert heaps_in(maps) == 2


def test_a_c_library_other_than_glibc_is_left_to_its_own_rules(monkeypatch):
    monkeypatch.delenv("MALLOC_ARENA_MAX", raising=False)
    monkeypatch.delenv("GLIBC_TUNABLES", raising=False)
    monkeypatch.setattr(malloc_arena.platform, "libc_ver", lambda: ("musl", "1.2"))
    monkeypatch.setattr(malloc_arena.ctypes, "CDLL", lambda _: pytest.fail("mallopt called"))
    assert malloc_arena.use_one_arena() is False
