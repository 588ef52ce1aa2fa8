"""Redis commands while requests wait on jobs: the change feed (JOB_WAIT=notify) beside the
50 ms poll it replaced (JOB_WAIT=poll), in one run, on one real redis-server.

Why it exists: in distributed mode a synchronous generation (and an event stream) waits on its
job in Redis. Each waiting request used to read its job every 50 ms: 16 waiting requests were
about 320 reads a second on one replica, each read a transaction of five commands, whatever
the jobs did. With the change feed a request reads its job when the store announces a change
to it, and at least every second as the fallback. What an operator sizing Redis needs is the
commands a second either way, and how soon a waiting request learns its job finished.

Each mode runs the web side's own code (imagegen.distributed: JobStore, RedisJobBoard, and for
notify the ChangeFeed) against a fresh redis-server, for --seconds:

- --clients requests wait at once, each on its own job (RedisJobBoard.wait, as a synchronous
  POST /generate waits); a request whose job finished submits the next one and waits again, so
  --clients are always waiting;
- one worker (a thread running the store's worker calls, no model) takes the oldest job, writes
  --steps steps --step-seconds apart with a heartbeat every second, and finishes it, as
  imagegen.distributed.worker does: every job's transitions, claims and steps are real.

Reported per mode: Redis's own count of commands processed (INFO stats) a second over the
window, the waiters' job reads among them (HGETALL calls: one per read), and the time from a
job's finish to its waiting request's answer (p50, p99, max).

    flock -s /tmp/quiet.lock .venv/bin/python bench/job_wait_bench.py          # 20 s a mode
    flock -s /tmp/quiet.lock .venv/bin/python bench/job_wait_bench.py --quick  # 5 s a mode
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench import common  # noqa: E402
from bench.common import median, percentile  # noqa: E402
from imagegen.distributed.board import RedisJobBoard  # noqa: E402
from imagegen.distributed.changes import ChangeFeed  # noqa: E402
from imagegen.distributed.store import CHANGED, EVERY_JOB, JobStore, job_key  # noqa: E402
from imagegen.distributed.timings import RedisTimings  # noqa: E402
from imagegen.generation.requests import GenerationRequest  # noqa: E402
from tests.support.distributed import RedisServer  # noqa: E402

REQUEST = GenerationRequest(prompt="a lighthouse at dawn", steps=8, guidance=0.0, seed=1)
HEARTBEAT = 1.0  # the worker's beat (WorkerRuntime.interval at JOB_HEARTBEAT_TTL's default)


@dataclass
class Row:
    mode: str
    clients: int
    seconds: float
    commands_per_second: float
    job_reads_per_second: float
    jobs_finished: int
    answer_p50_ms: float
    answer_p99_ms: float
    answer_max_ms: float


def git_commit() -> str:
    result = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True
    )
    return result.stdout.strip() or "unknown"


def counters(client) -> tuple[int, int]:
    """(commands processed, HGETALL calls) so far, as Redis counts them."""
    processed = int(client.info("stats")["total_commands_processed"])
    hgetall = client.info("commandstats").get("cmdstat_hgetall", {}).get("calls", 0)
    return processed, int(hgetall)


class Worker(threading.Thread):
    """A worker's Redis calls without a model: claim, a beat a second, a step write every
    `step_seconds`, the finish; `finished` holds each job's finish time."""

    def __init__(self, store: JobStore, steps: int, step_seconds: float) -> None:
        super().__init__(daemon=True)
        self.store, self.steps, self.step_seconds = store, steps, step_seconds
        self.stop = threading.Event()
        self.finished: dict[str, float] = {}

    def run(self) -> None:
        next_beat = 0.0
        while not self.stop.is_set():
            claimed = self.store.claim("bench-worker")
            if claimed is None:
                self.stop.wait(0.01)
                continue
            for step in range(1, self.steps + 1):
                if self.stop.wait(self.step_seconds):
                    return
                if time.monotonic() >= next_beat:
                    self.store.beat(claimed.job_id, claimed.attempt)
                    next_beat = time.monotonic() + HEARTBEAT
                self.store.update(claimed.job_id, claimed.attempt, step=step, steps=self.steps)
            self.finished[claimed.job_id] = time.monotonic()
            self.store.finish(claimed.job_id, claimed.attempt, state="succeeded", phase="done")


def run_mode(mode: str, server: RedisServer, args: argparse.Namespace) -> Row:
    client = server.client()
    client.flushall()
    store = JobStore(client, heartbeat_ttl=30)
    changes = ChangeFeed(server.client()) if mode == "notify" else None
    board = RedisJobBoard(
        store, models=None, queue_max=args.clients * 2, keep=1000, rules=None,
        timings=RedisTimings(client, "bench"), changes=changes,
    )  # fmt: skip
    worker = Worker(store, args.steps, args.step_seconds)
    stop, answers, lock = threading.Event(), [], threading.Lock()
    counter = iter(range(10**9))

    def waiting_client() -> None:
        while not stop.is_set():
            job_id = f"job-{next(counter)}"
            assert store.add(job_id, REQUEST, owner=None, batch=None,
                             queue_max=args.clients * 2, keep=1000)  # fmt: skip
            view = board.wait(job_id, timeout=args.seconds + 30)
            answered = time.monotonic()
            if view is not None and view.state.value == "succeeded" and job_id in worker.finished:
                with lock:
                    answers.append((answered - worker.finished[job_id]) * 1000)

    clients = [threading.Thread(target=waiting_client, daemon=True) for _ in range(args.clients)]
    worker.start()
    for thread in clients:
        thread.start()
    time.sleep(args.warmup)  # every client waiting, the listener subscribed
    before, started = counters(client), time.monotonic()
    with lock:
        answers.clear()
    time.sleep(args.seconds)
    after, seconds = counters(client), time.monotonic() - started
    with lock:
        measured = list(answers)
    stop.set()
    worker.stop.set()
    worker.join(10)
    for job_id in store.unfinished_ids():  # ends the clients still waiting
        store.redis.hset(job_key(job_id), "state", "cancelled")
    store.redis.publish(CHANGED, EVERY_JOB)
    for thread in clients:
        thread.join(5)
    if changes is not None:
        changes.close()
    row = Row(
        mode=mode, clients=args.clients, seconds=round(seconds, 2),
        commands_per_second=round((after[0] - before[0]) / seconds, 1),
        job_reads_per_second=round((after[1] - before[1]) / seconds, 1),
        jobs_finished=len(measured),
        answer_p50_ms=round(median(measured), 1) if measured else -1,
        answer_p99_ms=round(percentile(measured, 0.99), 1) if measured else -1,
        answer_max_ms=round(max(measured), 1) if measured else -1,
    )  # fmt: skip
    print(
        f"  {mode:>6}: {row.commands_per_second:8.1f} commands/s, {row.job_reads_per_second:7.1f} "
        f"job reads/s | {row.jobs_finished} jobs answered, finish -> answer p50 "
        f"{row.answer_p50_ms} ms p99 {row.answer_p99_ms} ms max {row.answer_max_ms} ms",
        flush=True,
    )
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--warmup", type=float, default=2.0)
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--step-seconds", type=float, default=0.25)
    parser.add_argument("--quick", action="store_true", help="5 s a mode")
    args = parser.parse_args()
    if args.quick:
        args.seconds = 5.0
    common.install_signal_handlers()
    machine = common.machine_info()
    commit = git_commit()
    common.print_machine(machine, extra=f"commit {commit}")
    print(
        f"{args.clients} waiting clients, one worker: {args.steps} steps "
        f"{args.step_seconds} s apart a job; {args.seconds:g} s measured a mode"
    )
    rows = []
    with tempfile.TemporaryDirectory() as work:
        for mode in ("poll", "notify"):
            with RedisServer(Path(work) / mode) as server:
                rows.append(run_mode(mode, server, args))
    poll, notify = rows
    summary = (
        f"summary: {args.clients} waiting: {poll.commands_per_second:.0f} commands/s polling "
        f"every 50 ms, {notify.commands_per_second:.0f} with the change feed "
        f"({notify.commands_per_second / poll.commands_per_second:.3f}x); answer p50 "
        f"{poll.answer_p50_ms} -> {notify.answer_p50_ms} ms"
    )
    print(summary)
    path = common.write_json(
        "job_wait_bench",
        {"machine": machine, "commit": commit, "args": vars(args),
         "rows": [asdict(row) for row in rows], "summary": summary},
    )  # fmt: skip
    print(f"results: {path}")


if __name__ == "__main__":
    main()
