"""GEN_NICE: while an image generates, the generating thread and torch's threads run at a
lower priority than the threads answering requests, read from the kernel's own record of the
app's threads (/proc/<pid>/task/<tid>/stat) under gunicorn."""

import os
import time
from pathlib import Path

import pytest
import requests

from tests.support.model_service import ready_app

LONG = {"prompt": "a long one", "steps": "400", "size": "64x64", "async": "true"}


def worker_pid(master_pid: int) -> int:
    children = Path(f"/proc/{master_pid}/task/{master_pid}/children").read_text().split()
    assert len(children) == 1, children  # gunicorn's single worker
    return int(children[0])


def nice_values(pid: int) -> list[int]:
    """Each thread's nice value: field 19 of stat, counted after the parenthesised name."""
    values = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            stat = (task / "stat").read_text()
        except FileNotFoundError:  # a thread that ended meanwhile
            continue
        values.append(int(stat.rsplit(")", 1)[1].split()[16]))
    return values


def niced_while_generating(app) -> list[int]:
    """The worker's threads' nice values while it generates."""
    pid = worker_pid(app.process.pid)
    job = requests.post(app.url("/generate"), data=LONG).json()
    deadline = time.monotonic() + 60
    while requests.get(app.url(f"/jobs/{job['id']}")).json()["progress"]["step"] < 2:
        assert time.monotonic() < deadline
        time.sleep(0.05)
    during = nice_values(pid)
    requests.delete(app.url(f"/jobs/{job['id']}"))
    return during


@pytest.mark.parametrize("nice", ["5", "0"])
def test_the_generation_runs_below_the_request_threads(hub_root, tmp_path, nice):
    base = os.getpriority(os.PRIO_PROCESS, 0)  # the app inherits the test's nice value
    lowered = min(19, base + int(nice))
    with ready_app(
        hub_root, tmp_path, GEN_NICE=nice, TORCH_THREADS="2", GEN_MAX_STEPS="500"
    ) as app:
        during = niced_while_generating(app)
    # The generating thread and the OpenMP worker it started for torch's second thread ...
    assert during.count(lowered) >= 2, during
    # ... and every other thread (gunicorn's main thread and its request threads) at base.
    assert during.count(base) >= 2 and set(during) == {base, lowered}, during
