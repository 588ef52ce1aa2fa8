"""Distributed-mode benchmark: throughput with one and two Celery workers, and how fast a web
replica that did not take a job answers for it, beside the in-process mode, in one run.

Why it exists: distributed mode (JOB_BROKER_URL) is there to run more generations at once
and to let any replica answer for any job. Whether a second worker on the same cores buys
throughput, and what a poll through Redis costs against the in-process lookup, are what an
operator needs before switching.

One run, on the cached full-size random-weight SD 1.5 (bench/model_fixture.py) placed on a
scratch share as a complete pull leaves it (no hub, no download):

- in-process: the app under gunicorn (the project's config), 8 async jobs (256x256, 4 steps,
  guidance 7, seeds 0..7) submitted at once; jobs per minute from the first submit to the
  last finish; `GET /jobs/<id>` latency sampled every 50 ms on the same app while they run,
  and on the idle app afterwards;
- distributed, 1 worker: redis-server, web replicas A and B, one worker (all cores); the
  jobs submitted on A, `GET /jobs/<id>` sampled on B, which took none of them;
- distributed, 2 workers: the same with two workers, each pinned to half the cores
  (taskset), TORCH_THREADS=auto (so each sizes torch's pool from its own affinity).

    flock /tmp/fullsize-bench.lock .venv/bin/python bench/distributed_bench.py
    .venv/bin/python bench/distributed_bench.py --quick   # 2 jobs, 128x128, 2 steps
    .venv/bin/python bench/distributed_bench.py --smoke   # tiny SD, 1 job of 1 step, 64x64: tests
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import requests

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench import common  # noqa: E402
from bench.common import fmt_ratio, median, percentile, ratio  # noqa: E402
from bench.model_fixture import ensure_model, place_on_share, scratch_dir, spec_for  # noqa: E402
from tests.support.distributed import RedisServer, WorkerProcess  # noqa: E402
from tests.support.processes import AppServer  # noqa: E402

INTERVAL = 0.05
PROMPT = "a lighthouse at dawn, oil painting"
GUIDANCE = "7"


@dataclass
class Row:
    mode: str
    jobs: int
    seconds: float
    jobs_per_minute: float
    poll_p50_ms: float
    poll_p99_ms: float
    idle_poll_p50_ms: float
    idle_poll_p99_ms: float
    poll_errors: int
    failed_jobs: int


def base_env(work: Path, repo_id: str) -> dict[str, str]:
    return {
        **common.QUIET_ENV,
        "MODEL_ID": repo_id,
        "MODEL_VARIANT": "fp16",
        "MODEL_DIR": str(work / "share"),
        "DOWNLOAD_CACHE_DIR": str(work / "cache"),
        "OUTPUT_DIR": str(work / "images"),
        "DEVICE": "cpu",
        "MONGODB_URI": "mongodb://127.0.0.1:9/unused",
        "GEN_QUEUE_MAX": "16",
        "GEN_MAX_N": "4",
        "TORCH_THREADS": "auto",
        "PRELOAD_MODEL_CODE": "1",
    }


def pull_and_wait(app: AppServer, workers: int | None, timeout: float = 900) -> None:
    requests.post(app.url("/model/pull"), timeout=30).raise_for_status()
    deadline = time.monotonic() + timeout
    while True:
        status = requests.get(app.url("/model/status"), timeout=30).json()
        ready = (
            status["state"] == "ready"
            if workers is None
            else sum(w["state"] == "ready" for w in status["workers"]) == workers
        )
        if ready:
            return
        if status["state"] == "failed" or time.monotonic() > deadline:
            raise RuntimeError(f"the model did not become ready: {status}")
        time.sleep(0.5)


def sample_polls(app: AppServer, job_id: str, stop: threading.Event) -> tuple[list[float], int]:
    times, errors = [], 0
    with requests.Session() as session:
        while not stop.is_set():
            started = time.perf_counter()
            try:
                session.get(app.url(f"/jobs/{job_id}"), timeout=10).raise_for_status()
                times.append((time.perf_counter() - started) * 1000)
            except requests.RequestException:
                errors += 1
            stop.wait(INTERVAL)
    return times, errors


def run_jobs(mode: str, submit_to: AppServer, poll_on: AppServer, args) -> Row:
    started = time.monotonic()
    ids = []
    for seed in range(args.jobs):
        answer = requests.post(
            submit_to.url("/generate"),
            data={"prompt": PROMPT, "size": f"{args.size}x{args.size}", "steps": str(args.steps),
                  "guidance": GUIDANCE, "seed": str(seed), "async": "true"},
            timeout=30,
        )  # fmt: skip
        answer.raise_for_status()
        ids.append(answer.json()["id"])
    stop, polls = threading.Event(), {}
    sampler = threading.Thread(
        target=lambda: polls.update(result=sample_polls(poll_on, ids[-1], stop)), daemon=True
    )
    sampler.start()
    states: dict[str, str] = {}
    while len(states) < len(ids):
        for job_id in ids:
            if job_id not in states:
                job = requests.get(poll_on.url(f"/jobs/{job_id}"), timeout=30).json()
                if job["state"] in ("succeeded", "failed", "cancelled"):
                    states[job_id] = job["state"]
        time.sleep(0.2)
    seconds = time.monotonic() - started
    stop.set()
    sampler.join()
    during, errors = polls["result"]
    idle_stop = threading.Event()
    threading.Timer(args.idle_seconds, idle_stop.set).start()
    idle, idle_errors = sample_polls(poll_on, ids[-1], idle_stop)
    row = Row(
        mode=mode, jobs=len(ids), seconds=round(seconds, 2),
        jobs_per_minute=round(len(ids) / seconds * 60, 3),
        poll_p50_ms=round(median(during), 2), poll_p99_ms=round(percentile(during, 0.99), 2),
        idle_poll_p50_ms=round(median(idle), 2), idle_poll_p99_ms=round(percentile(idle, 0.99), 2),
        poll_errors=errors + idle_errors,
        failed_jobs=sum(state != "succeeded" for state in states.values()),
    )  # fmt: skip
    print(
        f"  {mode}: {row.jobs} jobs in {row.seconds:.1f} s = {row.jobs_per_minute:.2f}/min | "
        f"GET /jobs/<id> during p50 {row.poll_p50_ms:.1f} ms p99 {row.poll_p99_ms:.1f} ms, idle "
        f"p50 {row.idle_poll_p50_ms:.1f} p99 {row.idle_poll_p99_ms:.1f} ms | failed "
        f"{row.failed_jobs}",
        flush=True,
    )
    return row


def in_process(work: Path, env: dict[str, str], args) -> Row:
    app = AppServer(env, work / "in-process.log")
    try:
        app.start(120)
        pull_and_wait(app, None)
        return run_jobs("in-process", app, app, args)
    finally:
        app.stop()


def distributed(work: Path, env: dict[str, str], workers: int, args) -> Row:
    redis_server = RedisServer(work / f"redis-{workers}")
    started: list = []
    try:
        redis_server.start()
        env = {**env, "JOB_BROKER_URL": redis_server.url}
        cores = sorted(os.sched_getaffinity(0))
        share = max(1, len(cores) // workers)
        for n in range(workers):
            mine = cores[n * share : (n + 1) * share] if workers > 1 else cores
            prefix = ["taskset", "-c", ",".join(map(str, mine))]
            worker = WorkerProcess(
                {**env, "TORCH_THREADS": "auto"}, work / f"worker-{workers}-{n}.log",
                f"bench{workers}-{n}", prefix=prefix,
            )  # fmt: skip
            started.append(worker.launch())
        a = AppServer({**env, "PRELOAD_MODEL_CODE": "0"}, work / f"web-a-{workers}.log")
        b = AppServer({**env, "PRELOAD_MODEL_CODE": "0"}, work / f"web-b-{workers}.log")
        started += [a.launch(), b.launch()]
        # Started together, waited for in turn: start-up is not what is measured.
        for process in started:
            process.wait_ready(300 if isinstance(process, WorkerProcess) else 120)
        pull_and_wait(a, workers)
        label = f"distributed, {workers} worker{'s' if workers > 1 else ''}"
        return run_jobs(label, a, b, args)
    finally:
        for process in reversed(started):
            process.stop()
        redis_server.stop()


def run(args: argparse.Namespace) -> int:
    machine = common.machine_info()
    common.print_machine(machine)
    ensure_model(args.model)
    work = scratch_dir("distributed-bench-")
    try:
        place_on_share(args.model, work / "share")
        env = base_env(work, spec_for(args.model).repo_id)
        print(
            f"{args.model} {args.size}x{args.size}, {args.steps} steps, guidance {GUIDANCE}, "
            f"{args.jobs} async jobs per mode{' | quick' if args.quick else ''}"
            f"{' | smoke' if args.smoke else ''}",
            flush=True,
        )
        rows = [in_process(work, env, args)]
        rows += [distributed(work, env, n, args) for n in (1, 2)]
    finally:
        shutil.rmtree(work, ignore_errors=True)
    base, one, two = rows
    vs_one = fmt_ratio(ratio(one.jobs_per_minute, base.jobs_per_minute))
    vs_two = fmt_ratio(ratio(two.jobs_per_minute, base.jobs_per_minute))
    summary = (
        f"summary: {args.jobs} jobs: in-process {base.jobs_per_minute:.2f}/min, 1 worker "
        f"{one.jobs_per_minute:.2f}/min ({vs_one}), 2 workers {two.jobs_per_minute:.2f}/min "
        f"({vs_two}) | GET /jobs/<id> p99 "
        f"during: same app {base.poll_p99_ms:.1f} ms, other replica {one.poll_p99_ms:.1f} / "
        f"{two.poll_p99_ms:.1f} ms; idle p50 {base.idle_poll_p50_ms:.1f} vs "
        f"{one.idle_poll_p50_ms:.1f} ms | failed {sum(r.failed_jobs for r in rows)}"
    )
    document: dict[str, Any] = {
        "config": {"model": args.model, "size": args.size, "steps": args.steps,
                   "jobs": args.jobs, "guidance": GUIDANCE, "quick": args.quick,
                   "smoke": args.smoke},
        "rows": [asdict(r) for r in rows],
    }  # fmt: skip
    common.finish("distributed_bench", machine, document, summary, args.json)
    return 0


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="sd15", choices=["sd15", "tiny"])
    parser.add_argument("--jobs", type=int, default=8)
    parser.add_argument("--size", type=int, default=256)
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--idle-seconds", type=float, default=5.0)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument(
        "--smoke",
        action="store_true",
        help="the tests' tiny SD, 1 job of 1 step at 64x64 per mode: proves the run end to end "
        "in the least time, measures nothing",
    )
    parser.add_argument("--json", type=Path, help="where to write results")
    args = parser.parse_args(argv)
    if args.quick:
        args.jobs, args.size, args.steps, args.idle_seconds = 2, 128, 2, 2.0
    if args.smoke:
        args.model, args.jobs, args.size, args.steps, args.idle_seconds = "tiny", 1, 64, 1, 0.2
    return args


def main(argv: list[str] | None = None) -> int:
    return common.main(parse_args, run, argv=argv)


if __name__ == "__main__":
    sys.exit(main())
