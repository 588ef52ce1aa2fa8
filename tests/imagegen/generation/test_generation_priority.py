"""GEN_NICE: the generating thread and the torch threads it starts run below the threads that
serve requests, so a request that wakes during a generation gets a core first. Read from the
running worker's threads in /proc (their speed is bench/todos_bench.py's to measure)."""

import os
import threading
from pathlib import Path

import requests

from imagegen.generation.priority import lower_this_thread
from tests.support.in_process import Served, ready_here
from tests.support.model_service import ready_app
from tests.support.processes import AppServer


def thread_nices(pid: int) -> dict[int, int]:
    """Each thread's nice value (field 19 of its stat line; the name before it may hold
    spaces); a thread that ends meanwhile is left out."""
    nices = {}
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            fields = (task / "stat").read_text().rpartition(")")[2].split()
        except FileNotFoundError:
            continue
        nices[int(task.name)] = int(fields[16])
    return nices


def worker_pid(app: AppServer) -> int:
    """gunicorn's one worker process, the one that generates."""
    (child,) = Path(f"/proc/{app.process.pid}/task/{app.process.pid}/children").read_text().split()
    return int(child)


def generate_one(app: Served) -> None:
    fields = {"prompt": "a red cube", "size": "64x64", "steps": "2", "seed": "1"}
    response = requests.post(app.url("/generate"), data=fields, timeout=120)
    assert response.status_code == 200, response.text


def test_the_generation_runs_gen_nice_below_the_request_threads(hub_root, tmp_path):
    """Under gunicorn: the worker's generating thread and the torch threads it starts."""
    nice = 7
    with ready_app(hub_root, tmp_path, GEN_NICE=str(nice), TORCH_THREADS="2") as app:
        pid = worker_pid(app)
        generate_one(app)
        for _ in range(20):  # requests on gunicorn's pool threads after the generation
            assert requests.get(app.url("/health"), timeout=10).status_code == 200
        nices = thread_nices(pid)

    base = nices[pid]  # the worker's main thread: where the process runs (0 unless under nice)
    lowered = [tid for tid, value in nices.items() if value != base]
    assert all(nices[tid] == min(19, base + nice) for tid in lowered), nices
    # the generating thread and the native threads torch started from it (its second
    # intra-op thread among them; no other thread of ours starts in that thread)
    assert len(lowered) >= 2, nices


def test_gen_nice_0_leaves_the_generation_where_the_process_runs(hub_root, tmp_path):
    """Served from this process: the generating thread's nice, read from inside the UNet's
    calls, is the process's own."""
    with ready_here(hub_root, tmp_path, GEN_NICE="0") as app:
        seen: list[int] = []
        unet = app.backend.loader.pipeline(60).unet
        hook = unet.register_forward_pre_hook(
            lambda *_: seen.append(os.getpriority(os.PRIO_PROCESS, threading.get_native_id()))
        )
        try:
            generate_one(app)
        finally:
            hook.remove()
    assert seen and set(seen) == {os.getpriority(os.PRIO_PROCESS, os.getpid())}


def test_a_thread_lowers_itself_relative_to_where_it_runs_and_no_further_than_19():
    seen: dict[str, int] = {}

    def lower_thrice() -> None:
        lower_this_thread(4)
        seen["first"] = os.getpriority(os.PRIO_PROCESS, threading.get_native_id())
        lower_this_thread(3)  # from where it runs now: 4 + 3, not 3
        seen["second"] = os.getpriority(os.PRIO_PROCESS, threading.get_native_id())
        lower_this_thread(40)
        seen["third"] = os.getpriority(os.PRIO_PROCESS, threading.get_native_id())

    start = os.getpriority(os.PRIO_PROCESS, threading.get_native_id())
    thread = threading.Thread(target=lower_thrice)
    thread.start()
    thread.join()
    assert seen == {"first": min(19, start + 4), "second": min(19, start + 7), "third": 19}
    assert os.getpriority(os.PRIO_PROCESS, threading.get_native_id()) == start  # not the caller's
