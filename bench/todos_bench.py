"""Benchmark of the todo API: create, get and lists of 100 and 1,000 todos under concurrent
keep-alive clients, beside its floors and a peer, all measured in one run.

Why it exists: raw requests per second say little on their own, because they depend on the
machine. So one run starts the real service exactly as `./scripts/serve` does (embedded
database, gunicorn with the project's config) and measures, on the same machine, at the same
concurrency and against the same database server:

- the HTTP floor: GET /health on the same server, which touches no database;
- the database floor: the same operations done directly with pymongo;
- the combined floor: both per-request times added (1 / (1/db + 1/http)), what a request would
  cost if the service added nothing to one driver call and one bare HTTP round trip;
- the peer: the same seed as a minimal Express + Mongoose service (bench/peers/express-mongoose,
  `npm ci` the first time), the stack a user would otherwise run.

Each operation runs against its database floor, the service and the peer back to back, so all
three see the same conditions; `--rounds N` repeats that and pools the samples. The issue's
targets: list of 100 >= 0.8x the combined floor, create and get >= 0.95x, every operation
>= 1.0x the peer.

With `--during-generation` it also measures GET /todo/<id> p50/p99 while the image service
generates (SD 1.5, full-size random weights from bench/model_fixture.py, 256x256) in the same
worker process, against the same load on the idle service, and the image's time under that
load and alone; for the service as shipped (the generation at GEN_NICE=10) and, as the
baseline, a second service with GEN_NICE=0 (the generation at the requests' priority), their
rounds taken in turns.

    .venv/bin/python bench/todos_bench.py                       # 1-2 min on 2 cores
    .venv/bin/python bench/todos_bench.py --during-generation   # plus about 8 min (2 GB model)
    .venv/bin/python bench/todos_bench.py --generation-only     # only those rows
    .venv/bin/python bench/todos_bench.py --quick               # a smaller run
    .venv/bin/python bench/todos_bench.py --smoke               # the smallest run: tests/bench/
"""

import argparse
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import requests
from bson import ObjectId
from pymongo import ASCENDING, MongoClient
from pymongo.collection import Collection

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench import common  # noqa: E402
from bench.common import QUIET_ENV, percentile  # noqa: E402
from bench.peers.runner import express_mongoose  # noqa: E402
from tests.support.processes import free_port  # noqa: E402

DEFAULT_JSON = ROOT / "bench" / "results" / "todos.json"
BATCH_MAX = 1000  # PATCH /todos accepts 1 to 1000 todos
SCRATCH_DB = "todos_bench_scratch"
PEER_DB = "todos_bench_peer"

# An operation is called once per work item with the state of its thread (a requests.Session
# for HTTP, a collection for the database) and answers whether it succeeded (2xx for HTTP).
Operation = Callable[[Any, Any], bool]

# The issue's targets: the service's rps over the combined floor's, and over the peer's.
FLOOR_TARGETS = {"create": 0.95, "get": 0.95, "list 100": 0.8}
PEER_TARGET = 1.0


@dataclass
class Timing:
    """One timed run of an operation: wall seconds, each request's latency, failures."""

    seconds: float
    latencies_ms: list[float]
    errors: int


@dataclass
class Result:
    name: str
    kind: str  # "http floor", "db floor", "service" or "peer"
    requests: int
    concurrency: int
    seconds: float
    rps: float
    p50_ms: float
    p99_ms: float
    errors: int
    floor_rps: float | None = None  # the combined floor's: 1 / (1/db + 1/http)
    ratio_to_floor: float | None = None
    ratio_to_peer: float | None = None

    @classmethod
    def pooled(cls, name: str, kind: str, concurrency: int, timings: list[Timing]) -> "Result":
        """All rounds together: requests over the seconds they took, percentiles of all."""
        latencies = sorted(ms for t in timings for ms in t.latencies_ms)
        seconds = sum(t.seconds for t in timings)
        return cls(
            name=name,
            kind=kind,
            requests=len(latencies),
            concurrency=concurrency,
            seconds=round(seconds, 3),
            rps=len(latencies) / seconds,
            p50_ms=percentile(latencies, 0.50),
            p99_ms=percentile(latencies, 0.99),
            errors=sum(t.errors for t in timings),
        )


@dataclass
class GenerationRow:
    """GET /todo/<id> while the worker is idle, or while it generates an image."""

    setting: str  # "GEN_NICE=10" (as shipped) or "GEN_NICE=0" (the baseline)
    load: str  # LOADS' names
    phase: str
    requests: int
    concurrency: int
    p50_ms: float
    p99_ms: float
    max_ms: float
    errors: int
    seconds: float
    ratio_p99_to_idle: float | None = None
    generation_seconds: float | None = None  # one image under this load, mean of the rounds
    generation_alone_seconds: float | None = None  # one image with no request load


@dataclass
class Config:
    requests: int
    concurrency: int
    list_sizes: tuple[int, ...]
    warmup: int
    rounds: int
    peer: bool
    during_generation: bool
    generation_only: bool
    generation_rounds: int
    generation_size: int
    generation_steps: int
    json_path: Path
    quick: bool
    smoke: bool = False


# --- the service -----------------------------------------------------------------------------


def service_env(
    data_dir: Path, http_port: int, db_port: int, extra: dict[str, str]
) -> dict[str, str]:
    env = {key: value for key, value in os.environ.items() if key != "MONGODB_URI"}
    env.update(
        DATA_DIR=str(data_dir),
        BIND=f"127.0.0.1:{http_port}",
        EMBEDDED_DB_PORT=str(db_port),
        ACCESS_LOG="0",
        **extra,
    )
    return env


def wait_for_health(url: str, process: subprocess.Popen, log_path: Path, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while True:
        if process.poll() is not None:
            raise RuntimeError(
                f"scripts/serve.py exited with {process.returncode}; log:\n{tail(log_path)}"
            )
        try:
            if requests.get(url, timeout=1).status_code == 200:
                return
        except requests.RequestException:
            pass
        if time.monotonic() > deadline:
            raise RuntimeError(
                f"{url} did not answer within {timeout:.0f}s; log:\n{tail(log_path)}"
            )
        time.sleep(0.2)


def tail(path: Path, lines: int = 30) -> str:
    text = path.read_text(errors="replace") if path.exists() else ""
    return "\n".join(text.splitlines()[-lines:])


def stop_process(process: subprocess.Popen, timeout: float = 60.0) -> None:
    """SIGTERM, which serve.py forwards to gunicorn before stopping the database cleanly."""
    if process.poll() is not None:
        return
    process.send_signal(signal.SIGTERM)
    try:
        process.wait(timeout)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()


@dataclass
class Service:
    base_url: str
    db_port: int
    data_dir: Path

    def mongo_uri(self, database: str) -> str:
        return f"mongodb://127.0.0.1:{self.db_port}/{database}?retryWrites=false"


@contextmanager
def running_service(extra_env: dict[str, str] | None = None) -> Iterator[Service]:
    """The service as README's run command starts it, in a temp DATA_DIR removed afterwards."""
    data_dir = Path(tempfile.mkdtemp(prefix="todos-bench-"))
    http_port, db_port = free_port(), free_port()
    log_path = data_dir / "serve.log"
    process: subprocess.Popen | None = None
    try:
        with log_path.open("ab") as log:
            # Its own session: a Ctrl-C reaches only this script, which then stops it in order.
            process = subprocess.Popen(
                [sys.executable, str(ROOT / "scripts" / "serve.py")],
                cwd=ROOT, env=service_env(data_dir, http_port, db_port, extra_env or {}),
                stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
            )  # fmt: skip
        base_url = f"http://127.0.0.1:{http_port}"
        wait_for_health(base_url + "/health", process, log_path, timeout=90)
        yield Service(base_url=base_url, db_port=db_port, data_dir=data_dir)
    finally:
        if process is not None:
            stop_process(process)
        shutil.rmtree(data_dir, ignore_errors=True)


# --- the load runner -------------------------------------------------------------------------


def run_load(
    items: Sequence[Any],
    operation: Operation,
    make_state: Callable[[], Any],
    concurrency: int,
) -> tuple[float, list[float], int]:
    """Runs operation once per item over `concurrency` threads; (seconds, latencies ms, errors).

    Threads take the next item from a shared counter, so a slow thread does not leave the
    others idle at the end; all threads start together behind a barrier.
    """
    latencies: list[float] = []
    errors = 0
    lock = threading.Lock()
    next_index = iter(range(len(items)))
    barrier = threading.Barrier(concurrency + 1)
    failures: list[BaseException] = []

    def worker() -> None:
        nonlocal errors
        state = make_state()
        mine: list[float] = []
        failed = 0
        barrier.wait()
        try:
            while True:
                with lock:
                    index = next(next_index, None)
                if index is None:
                    break
                start = time.perf_counter()
                try:
                    ok = operation(state, items[index])
                except Exception as exc:  # a transport error counts like a non-2xx answer
                    ok = False
                    if not failures:
                        failures.append(exc)
                mine.append((time.perf_counter() - start) * 1000)
                failed += not ok
        finally:
            if isinstance(state, requests.Session):
                state.close()
            with lock:
                latencies.extend(mine)
                errors += failed

    threads = [threading.Thread(target=worker, daemon=True) for _ in range(concurrency)]
    for thread in threads:
        thread.start()
    barrier.wait()
    started = time.perf_counter()
    for thread in threads:
        thread.join()
    seconds = time.perf_counter() - started
    if failures:
        print(f"  first exception: {failures[0]!r}", file=sys.stderr)
    return seconds, latencies, errors


def timed(
    items: Sequence[Any],
    warmup_items: Sequence[Any],
    operation: Operation,
    make_state: Callable[[], Any],
    concurrency: int,
) -> Timing:
    """Warms the operation up on warmup_items (not counted), then times it over items."""
    if warmup_items:
        run_load(warmup_items, operation, make_state, concurrency)
    seconds, latencies, errors = run_load(items, operation, make_state, concurrency)
    return Timing(seconds, latencies, errors)


def report(label: str, timing: Timing) -> None:
    latencies = sorted(timing.latencies_ms)
    print(
        f"  {label:<22} {len(latencies) / timing.seconds:8.0f} rps  "
        f"p50 {percentile(latencies, 0.5):7.2f} ms  p99 {percentile(latencies, 0.99):7.2f} ms  "
        f"errors {timing.errors}",
        flush=True,
    )


def cycle(values: Sequence[Any], count: int) -> list[Any]:
    return [values[i % len(values)] for i in range(count)]


# --- HTTP operations -------------------------------------------------------------------------


def is_2xx(response: requests.Response) -> bool:
    return 200 <= response.status_code < 300


def http_get(base_url: str) -> Operation:
    def operation(session: requests.Session, path: str) -> bool:
        return is_2xx(session.get(base_url + path, timeout=30))

    return operation


def http_create(base_url: str, created_ids: list[str]) -> Operation:
    lock = threading.Lock()

    def operation(session: requests.Session, title: str) -> bool:
        response = session.post(base_url + "/todo", json={"todo": {"title": title}}, timeout=30)
        if not is_2xx(response):
            return False
        todo_id = response.json()["data"]["id"]
        with lock:
            created_ids.append(todo_id)
        return True

    return operation


def titles(prefix: str, count: int) -> list[str]:
    """Unique titles within the 40-character limit."""
    run = uuid.uuid4().hex[:8]
    return [f"{prefix}-{run}-{i}" for i in range(count)]


def delete_all(base_url: str) -> None:
    requests.delete(base_url + "/todos", timeout=120).raise_for_status()


def seed_todos(base_url: str, count: int) -> None:
    """Leaves exactly `count` todos stored, inserted in batches through the API."""
    delete_all(base_url)
    names = titles("list", count)
    for start in range(0, count, BATCH_MAX):
        chunk = [{"title": title} for title in names[start : start + BATCH_MAX]]
        response = requests.patch(base_url + "/todos", json={"todos": chunk}, timeout=120)
        response.raise_for_status()
    stored = len(requests.get(base_url + "/todos", timeout=120).json()["data"])
    if stored != count:
        raise RuntimeError(f"seeded {count} todos but GET /todos at {base_url} returns {stored}")


# --- database operations ---------------------------------------------------------------------


def todo_document(title: str) -> dict[str, Any]:
    """Shaped like a stored todo, so the database floor moves the same amount of data."""
    return {"title": title, "description": None, "createdAt": datetime.now(UTC), "updatedAt": None}


def db_insert(collection: Collection, title: str) -> bool:
    collection.insert_one(todo_document(title))
    return True


def db_find_one(collection: Collection, todo_id: ObjectId) -> bool:
    return collection.find_one({"_id": todo_id}) is not None


def db_find_many(list_size: int) -> Operation:
    """The plain read of list_size documents, as GET /todos asks the server for (it leaves
    out pending todos and orders the list itself, see todos.selectors.todo_list)."""

    def operation(collection: Collection, _item: object) -> bool:
        return len(list(collection.find().limit(list_size))) == list_size

    return operation


def scratch_collection(client: MongoClient, name: str) -> Collection:
    collection = client[SCRATCH_DB][name]
    collection.drop()
    collection.create_index([("title", ASCENDING)], unique=True)
    return collection


# --- the benchmark ---------------------------------------------------------------------------


@dataclass
class Run:
    """What one run measures against, and the timings it has taken so far."""

    service: Service
    peer_url: str | None
    client: MongoClient
    config: Config
    timings: dict[tuple[str, str], list[Timing]] = field(default_factory=dict)

    def servers(self) -> list[tuple[str, str]]:
        """(kind, base URL) of the HTTP implementations of the seed: the service, the peer."""
        peer = [("peer", self.peer_url)] if self.peer_url else []
        return [("service", self.service.base_url), *peer]

    def record(self, kind: str, name: str, timing: Timing) -> None:
        self.timings.setdefault((kind, name), []).append(timing)
        report(f"{kind} {name}", timing)


def measure_health(run: Run) -> None:
    config = run.config
    run.record("http floor", "health", timed(
        ["/health"] * config.requests, ["/health"] * config.warmup,
        http_get(run.service.base_url), requests.Session, config.concurrency,
    ))  # fmt: skip


def measure_create(run: Run) -> dict[str, list[str]]:
    """Creates through each implementation; returns the ids each created, for get."""
    config = run.config
    inserts = scratch_collection(run.client, "inserts")
    run.record("db floor", "create", timed(
        titles("db", config.requests), titles("dbwarm", config.warmup),
        db_insert, lambda: inserts, config.concurrency,
    ))  # fmt: skip
    created: dict[str, list[str]] = {}
    for kind, base_url in run.servers():
        created[kind] = []
        run.record(kind, "create", timed(
            titles(kind[:4], config.requests), titles(kind[:4] + "warm", config.warmup),
            http_create(base_url, created[kind]), requests.Session, config.concurrency,
        ))  # fmt: skip
    return created


def measure_get(run: Run, created: dict[str, list[str]]) -> None:
    config = run.config
    inserts = run.client[SCRATCH_DB]["inserts"]
    object_ids = [doc["_id"] for doc in inserts.find({}, {"_id": 1})]
    run.record("db floor", "get", timed(
        cycle(object_ids, config.requests), cycle(object_ids[::-1], config.warmup),
        db_find_one, lambda: inserts, config.concurrency,
    ))  # fmt: skip
    for kind, base_url in run.servers():
        paths = [f"/todo/{todo_id}" for todo_id in created[kind]]
        run.record(kind, "get", timed(
            cycle(paths, config.requests), cycle(paths[::-1], config.warmup),
            http_get(base_url), requests.Session, config.concurrency,
        ))  # fmt: skip


def list_requests(config: Config, size: int) -> tuple[int, int]:
    """(requests, warm-up) for a list of `size`: fewer for long lists, each costs more."""
    scale = max(1, size // 200)
    least = config.requests if config.smoke else 50
    return max(least, config.requests // scale), max(config.concurrency, config.warmup // scale)


def measure_list(run: Run, size: int) -> None:
    config = run.config
    count, warmup = list_requests(config, size)
    name = f"list {size}"
    listed = scratch_collection(run.client, f"listed{size}")
    listed.insert_many([todo_document(title) for title in titles("dblist", size)])
    run.record("db floor", name, timed(
        [None] * count, [None] * warmup, db_find_many(size), lambda: listed, config.concurrency,
    ))  # fmt: skip
    for kind, base_url in run.servers():
        seed_todos(base_url, size)
        run.record(kind, name, timed(
            ["/todos"] * count, ["/todos"] * warmup,
            http_get(base_url), requests.Session, config.concurrency,
        ))  # fmt: skip


def warm_up(run: Run) -> None:
    """Every route of each server, untimed, before anything is measured: V8 compiles the
    peer's hot paths after some thousand calls (its first 2,000 creates ran at 0.9x of the
    next 2,000), and both servers fill their connection pools."""
    count = run.config.requests if run.config.smoke else 200 if run.config.quick else 1000
    for _kind, base_url in run.servers():
        created: list[str] = []
        run_load(titles("warm", count), http_create(base_url, created), requests.Session, 8)
        paths = [f"/todo/{todo_id}" for todo_id in created]
        run_load(paths, http_get(base_url), requests.Session, 8)
        seed_todos(base_url, 100)
        run_load(["/todos"] * (count // 5), http_get(base_url), requests.Session, 8)
        delete_all(base_url)


def run_benchmark(service: Service, peer_url: str | None, config: Config) -> list[Result]:
    """Each operation on its database floor, the service and the peer back to back, so all
    three see the same conditions; the HTTP floor once per round."""
    client: MongoClient = MongoClient(
        service.mongo_uri(SCRATCH_DB),
        maxPoolSize=config.concurrency + 2,
        serverSelectionTimeoutMS=10_000,
    )
    run = Run(service=service, peer_url=peer_url, client=client, config=config)
    try:
        warm_up(run)
        for round_number in range(1, config.rounds + 1):
            if config.rounds > 1:
                print(f" round {round_number} of {config.rounds}", flush=True)
            measure_health(run)
            created = measure_create(run)
            measure_get(run, created)
            for size in config.list_sizes:
                measure_list(run, size)
        client.drop_database(SCRATCH_DB)
    finally:
        client.close()
    return pooled_results(run)


def pooled_results(run: Run) -> list[Result]:
    """The pooled rows, with each implementation's ratios to the combined floor and the peer."""
    results = {
        key: Result.pooled(key[1], key[0], run.config.concurrency, timings)
        for key, timings in run.timings.items()
    }
    health = results[("http floor", "health")]
    for (kind, name), result in results.items():
        if kind not in ("service", "peer"):
            continue
        db = results[("db floor", name)]
        result.floor_rps = 1 / (1 / db.rps + 1 / health.rps)
        result.ratio_to_floor = result.rps / result.floor_rps
        peer = results.get(("peer", name))
        if kind == "service" and peer is not None:
            result.ratio_to_peer = result.rps / peer.rps
    order = ["http floor", "db floor", "service", "peer"]
    return sorted(results.values(), key=lambda r: order.index(r.kind))


# --- todo latency while an image generates -------------------------------------------------


def generation_env(endpoint: str, repo_id: str, work: Path) -> dict[str, str]:
    """The image service's settings for the bench's local hub (as bench/overhead_bench.py)."""
    return {
        "MODEL_ID": repo_id,
        "HF_ENDPOINT": endpoint,
        "MODEL_DIR": str(work / "share"),
        "DOWNLOAD_CACHE_DIR": str(work / "cache"),
        "DEVICE": "cpu",
        "LOG_LEVEL": "WARNING",
        **QUIET_ENV,
    }


def pull_model(base_url: str, timeout: float = 900.0) -> float:
    """POST /model/pull, then wait until the model is ready; returns the seconds it took."""
    started = time.monotonic()
    requests.post(base_url + "/model/pull", timeout=30).raise_for_status()
    while (status := requests.get(base_url + "/model/status", timeout=30).json())["state"] not in (
        "ready",
        "failed",
    ):
        if time.monotonic() - started > timeout:
            raise TimeoutError(f"the model is still {status['state']} after {timeout:.0f}s")
        time.sleep(0.5)
    if status["state"] != "ready":
        raise RuntimeError(f"the pull failed: {status['error']}")
    return time.monotonic() - started


class Sampler:
    """Threads doing GET /todo/<id> until stopped, back to back or paced; each sample keeps
    its start."""

    def __init__(
        self, base_url: str, paths: Sequence[str], concurrency: int, interval: float = 0.0
    ) -> None:
        self.base_url, self.paths = base_url, list(paths)
        self.interval = interval  # each thread's request starts this far apart; 0: back to back
        self.samples: list[tuple[float, float, bool]] = []  # (started, ms, ok)
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._threads = [
            threading.Thread(target=self._run, args=(i,), daemon=True) for i in range(concurrency)
        ]

    def _run(self, offset: int) -> None:
        with requests.Session() as session:
            index = offset
            due = time.perf_counter()
            while not self._stop.is_set():
                path = self.paths[index % len(self.paths)]
                index += len(self._threads)
                if self.interval:  # after a stall, no burst to catch up: the pace goes on
                    due = max(due + self.interval, time.perf_counter())
                    if self._stop.wait(due - time.perf_counter()):
                        break
                started = time.perf_counter()
                try:
                    ok = session.get(self.base_url + path, timeout=60).status_code == 200
                except requests.RequestException:
                    ok = False
                with self._lock:
                    self.samples.append((started, (time.perf_counter() - started) * 1000, ok))

    def __enter__(self) -> "Sampler":
        for thread in self._threads:
            thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join()

    def window(self, start: float, end: float) -> list[tuple[float, bool]]:
        """The samples (ms, ok) that started within [start, end) (perf_counter seconds)."""
        return [(ms, ok) for at, ms, ok in self.samples if start <= at < end]


def generation_row(
    setting: str, load: "Load", phase: str, window: list[tuple[float, bool]], seconds: float
) -> "GenerationRow":
    latencies = sorted(ms for ms, _ in window)
    return GenerationRow(
        setting=setting,
        load=load.name,
        phase=phase,
        requests=len(window),
        concurrency=load.clients,
        p50_ms=percentile(latencies, 0.50),
        p99_ms=percentile(latencies, 0.99),
        max_ms=max(latencies, default=float("nan")),
        errors=sum(not ok for _, ok in window),
        seconds=round(seconds, 1),
    )


def generate_async(base_url: str, size: int, steps: int) -> str:
    fields = {"prompt": "a lighthouse at dawn", "steps": str(steps), "size": f"{size}x{size}",
              "seed": "42", "async": "true"}  # fmt: skip
    response = requests.post(base_url + "/generate", data=fields, timeout=60)
    if response.status_code != 202:
        raise RuntimeError(f"/generate answered {response.status_code}: {response.text[:300]}")
    return response.json()["id"]


def job_state(base_url: str, job_id: str) -> dict[str, Any]:
    return requests.get(f"{base_url}/jobs/{job_id}", timeout=60).json()


def generate_and_wait(base_url: str, config: Config) -> tuple[float, float]:
    """One image: (perf_counter when its job started running, when it finished)."""
    job_id = generate_async(base_url, config.generation_size, config.generation_steps)
    running_at = None
    while (job := job_state(base_url, job_id))["state"] not in (
        "succeeded", "failed", "cancelled",
    ):  # fmt: skip
        if job["state"] == "running" and running_at is None:
            running_at = time.perf_counter()
        time.sleep(0.1)
    finished_at = time.perf_counter()
    if job["state"] != "succeeded":
        raise RuntimeError(f"the generation {job['state']}: {job.get('error')}")
    return running_at or finished_at, finished_at


@dataclass(frozen=True)
class Load:
    """The requests sent during those rows: a few users' clients, back to back (as much as the
    machine serves) or paced (the traffic a small deployment sees)."""

    name: str
    clients: int
    interval: float  # seconds between one client's request starts; 0: back to back


LOADS = (Load("2 clients back to back", 2, 0.0), Load("2 clients x 50/s", 2, 0.02))


@dataclass
class Windows:
    """The samples one service's rounds collected under one load."""

    idle: list[tuple[float, bool]] = field(default_factory=list)
    generating: list[tuple[float, bool]] = field(default_factory=list)
    idle_seconds: float = 0.0
    loaded_seconds: list[float] = field(default_factory=list)  # each image under the load


@dataclass
class GeneratingService:
    """One service of the during-generation rows, with what its rounds collected."""

    setting: str  # the GEN_NICE it runs with, as the rows name it
    base_url: str
    paths: list[str] = field(default_factory=list)
    windows: dict[Load, Windows] = field(default_factory=lambda: {x: Windows() for x in LOADS})
    alone_seconds: list[float] = field(default_factory=list)  # each image with no request load

    def prepare(self) -> None:
        seconds = pull_model(self.base_url)
        print(f"  {self.setting}: model pulled and loaded in {seconds:.1f} s", flush=True)
        seed_todos(self.base_url, 100)
        todos = requests.get(self.base_url + "/todos", timeout=60).json()["data"]
        self.paths = [f"/todo/{todo['id']}" for todo in todos]

    def rows(self) -> list["GenerationRow"]:
        rows = []
        for load, seen in self.windows.items():
            idle = generation_row(self.setting, load, "idle", seen.idle, seen.idle_seconds)
            generating = generation_row(
                self.setting, load, "generating", seen.generating, sum(seen.loaded_seconds)
            )
            generating.ratio_p99_to_idle = generating.p99_ms / idle.p99_ms
            generating.generation_seconds = mean(seen.loaded_seconds)
            generating.generation_alone_seconds = mean(self.alone_seconds)
            rows += [idle, generating]
        return rows


def mean(values: Sequence[float]) -> float:
    return round(sum(values) / len(values), 1) if values else float("nan")


def measure_round(service: GeneratingService, config: Config) -> None:
    """Under each load: GET /todo/<id> for a while on the idle service, then while it
    generates one image. Then one image with no request load, for its time alone."""
    idle_seconds = 3.0 if config.quick else 8.0
    for load, seen in service.windows.items():
        with Sampler(service.base_url, service.paths, load.clients, load.interval) as sampler:
            time.sleep(1.0)  # the threads' first requests open their connections
            started = time.perf_counter()
            time.sleep(idle_seconds)
            idle_end = time.perf_counter()
            running_at, finished_at = generate_and_wait(service.base_url, config)
        seen.idle += sampler.window(started, idle_end)
        seen.idle_seconds += idle_end - started
        seen.generating += sampler.window(running_at, finished_at)
        seen.loaded_seconds.append(finished_at - running_at)
    running_at, finished_at = generate_and_wait(service.base_url, config)
    service.alone_seconds.append(finished_at - running_at)
    loaded = ", ".join(f"{seen.loaded_seconds[-1]:.1f} s" for seen in service.windows.values())
    print(
        f"  {service.setting}: image under the loads {loaded}, alone "
        f"{service.alone_seconds[-1]:.1f} s",
        flush=True,
    )


def measure_during_generation(
    services: Sequence[GeneratingService], config: Config
) -> list[GenerationRow]:
    """Each service's rows, its rounds taken in turns with the others' (so a change in the
    machine's load over the run falls on every service alike); the first generation of each
    (one-time costs) is not measured."""
    for service in services:
        service.prepare()
        generate_and_wait(service.base_url, config)
    for _ in range(config.generation_rounds):
        for service in services:
            measure_round(service, config)
    return [row for service in services for row in service.rows()]


# --- output ----------------------------------------------------------------------------------


def print_header(machine: dict[str, Any], config: Config) -> None:
    common.print_machine(machine)
    if config.generation_only:
        print(f"run: the during-generation rows only | rounds {config.generation_rounds}")
        return
    print(
        f"run: concurrency {config.concurrency} | {config.requests} requests per operation "
        f"(fewer for long lists) | lists of {', '.join(map(str, config.list_sizes))} todos | "
        f"warm-up {config.warmup} | rounds {config.rounds} | peer "
        f"{'Express + Mongoose' if config.peer else 'off'}{' | quick' if config.quick else ''}"
        f"{' | smoke' if config.smoke else ''}"
    )


def ratio(value: float | None) -> str:
    return "" if value is None else f"{value:.2f}x"


def print_table(results: Sequence[Result]) -> None:
    header = (
        f"{'kind':<10} {'operation':<10} {'requests':>8} {'rps':>7} {'p50 ms':>8} {'p99 ms':>8} "
        f"{'errors':>6} {'floor rps':>9} {'vs floor':>8} {'vs peer':>7}"
    )
    print()
    print(header)
    print("-" * len(header))
    for r in results:
        floor = "" if r.floor_rps is None else f"{r.floor_rps:.0f}"
        print(
            f"{r.kind:<10} {r.name:<10} {r.requests:>8} {r.rps:>7.0f} {r.p50_ms:>8.2f} "
            f"{r.p99_ms:>8.2f} {r.errors:>6} {floor:>9} {ratio(r.ratio_to_floor):>8} "
            f"{ratio(r.ratio_to_peer):>7}"
        )
    print()


def check(name: str, against: str, value: float, wanted: float) -> dict[str, Any]:
    return {"operation": name, "against": against, "target": wanted, "ratio": value,
            "met": value >= wanted}  # fmt: skip


def targets(results: Sequence[Result]) -> list[dict[str, Any]]:
    """Each of the issue's targets for the service, with its figure and whether it is met."""
    checks = []
    for r in results:
        if r.kind != "service":
            continue
        wanted = FLOOR_TARGETS.get(r.name)
        if wanted is not None and r.ratio_to_floor is not None:
            checks.append(check(r.name, "combined floor", r.ratio_to_floor, wanted))
        if r.ratio_to_peer is not None:
            checks.append(check(r.name, "peer", r.ratio_to_peer, PEER_TARGET))
    return checks


def print_targets(checks: Sequence[dict[str, Any]]) -> None:
    print("targets (the service's rps over the baseline's, same run):")
    for c in checks:
        print(
            f"  {c['operation']:<10} vs {c['against']:<15} {c['ratio']:.2f}x "
            f"(>= {c['target']:.2f}x): {'met' if c['met'] else 'NOT met'}"
        )
    print()


def print_generation(rows: Sequence[GenerationRow]) -> None:
    header = (
        f"{'GET /todo/<id>':<48} {'requests':>8} {'p50 ms':>7} {'p99 ms':>7} {'max ms':>7} "
        f"{'p99/idle':>8} {'image s':>7} {'alone s':>7}"
    )
    print(header)
    print("-" * len(header))
    for r in rows:
        image = "" if r.generation_seconds is None else f"{r.generation_seconds:.1f}"
        alone = "" if r.generation_alone_seconds is None else f"{r.generation_alone_seconds:.1f}"
        label = f"{r.setting}, {r.load}, {r.phase}"
        print(
            f"{label:<48} {r.requests:>8} {r.p50_ms:>7.1f} {r.p99_ms:>7.1f} {r.max_ms:>7.1f} "
            f"{ratio(r.ratio_p99_to_idle):>8} {image:>7} {alone:>7}"
        )
    print()


def summary_line(
    results: Sequence[Result], checks: Sequence[dict[str, Any]], rows: Sequence[GenerationRow]
) -> str:
    parts = [
        f"{r.name} {r.rps:.0f} rps ({ratio(r.ratio_to_floor)} floor"
        + (f", {ratio(r.ratio_to_peer)} peer)" if r.ratio_to_peer is not None else ")")
        for r in results
        if r.kind == "service"
    ]
    met = sum(c["met"] for c in checks)
    generation = "".join(
        f" | {r.setting}, {r.load}: get p99 generating {r.p99_ms:.1f} ms "
        f"({ratio(r.ratio_p99_to_idle)} idle), image {r.generation_seconds:.1f} s (alone "
        f"{r.generation_alone_seconds:.1f} s)"
        for r in rows
        if r.phase == "generating"
    )
    errors = sum(r.errors for r in results) + sum(r.errors for r in rows)
    return (
        f"summary: {' | '.join(parts)} | targets met {met}/{len(checks)}{generation} | "
        f"errors {errors}"
    )


# --- entry point -----------------------------------------------------------------------------


def parse_args(argv: Sequence[str] | None = None) -> Config:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--concurrency", type=int, default=8, help="client threads (8)")
    parser.add_argument(
        "--requests", type=int, help="requests per operation (2000; 300 with --quick)"
    )
    parser.add_argument(
        "--list-sizes", default="100,1000", help="todos stored for the list rows (100,1000)"
    )
    parser.add_argument("--rounds", type=int, default=1, help="repeat and pool (1)")
    parser.add_argument("--no-peer", action="store_true", help="skip Express + Mongoose")
    parser.add_argument(
        "--during-generation", action="store_true",
        help="also todo latency while generating, as shipped (GEN_NICE=10) and with GEN_NICE=0",
    )  # fmt: skip
    parser.add_argument(
        "--generation-only", action="store_true",
        help="only the during-generation rows (implies --during-generation)",
    )  # fmt: skip
    parser.add_argument(
        "--generation-rounds", type=int, default=2,
        help="images per service for those rows, pooled (2; 1 with --quick)",
    )  # fmt: skip
    parser.add_argument("--size", type=int, default=256, help="generation side (256)")
    parser.add_argument("--steps", type=int, default=4, help="generation steps (4)")
    parser.add_argument("--json", type=Path, default=DEFAULT_JSON, help="where to write results")
    parser.add_argument("--quick", action="store_true", help="a smaller run")
    parser.add_argument(
        "--smoke",
        action="store_true",
        help="20 requests per operation at concurrency 2, a list of 10, no peer, as many to warm "
        "up: proves the run end to end in the least time, measures nothing",
    )
    args = parser.parse_args(argv)
    if args.smoke:
        args.quick, args.no_peer = True, True
        args.requests, args.concurrency, args.list_sizes = 20, 2, "10"
    count = args.requests or (300 if args.quick else 2000)
    try:
        sizes = tuple(int(size) for size in args.list_sizes.split(","))
    except ValueError:
        parser.error("--list-sizes: comma-separated integers")
    if min(count, args.concurrency, args.rounds, args.generation_rounds, *sizes) < 1:
        parser.error(
            "--requests, --concurrency, --rounds, --generation-rounds and --list-sizes must be "
            "positive"
        )
    return Config(
        requests=count,
        concurrency=args.concurrency,
        list_sizes=sizes,
        warmup=max(args.concurrency * 5, count // 20),
        rounds=args.rounds,
        peer=not args.no_peer,
        during_generation=args.during_generation or args.generation_only,
        generation_only=args.generation_only,
        generation_rounds=1 if args.quick else args.generation_rounds,
        generation_size=args.size,
        generation_steps=args.steps,
        json_path=args.json,
        quick=args.quick,
        smoke=args.smoke,
    )


@contextmanager
def generation_settings(stack: ExitStack, enabled: bool) -> Iterator[dict[str, str]]:
    """The service's extra settings: for a generation, a local hub (its own process) serving
    the cached SD 1.5 random-weight model, and a scratch share removed afterwards."""
    if not enabled:
        yield {}
        return
    from bench.model_fixture import ensure_model, hub_process, scratch_dir

    ensure_model("sd15")
    endpoint, repo_id = stack.enter_context(hub_process("sd15"))
    work = scratch_dir("todos-bench-")
    try:
        yield generation_env(endpoint, repo_id, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def run(config: Config) -> int:
    machine = common.machine_info()
    print_header(machine, config)
    started = time.monotonic()
    results: list[Result] = []
    rows: list[GenerationRow] = []
    with ExitStack() as stack:
        extra_env = stack.enter_context(generation_settings(stack, config.during_generation))
        print("starting the service (scripts/serve.py, embedded database)...", flush=True)
        service = stack.enter_context(running_service(extra_env))
        if not config.generation_only:
            peer_url = None
            if config.peer:
                peer_url = stack.enter_context(express_mongoose(
                    service.mongo_uri(PEER_DB), free_port(), service.data_dir / "peer.log"
                ))  # fmt: skip
            print(f"service at {service.base_url}, peer at {peer_url}; measuring:", flush=True)
            results = run_benchmark(service, peer_url, config)
        if config.during_generation:
            print("todo latency while an image generates (a second service: GEN_NICE=0)...")
            baseline = stack.enter_context(running_service(extra_env | {"GEN_NICE": "0"}))
            shipped = os.environ.get("GEN_NICE") or "10"  # what the service runs with
            rows = measure_during_generation(
                [GeneratingService(f"GEN_NICE={shipped}", service.base_url),
                 GeneratingService("GEN_NICE=0", baseline.base_url)],
                config,
            )  # fmt: skip
    checks = targets(results)
    if results:
        print_table(results)
        print_targets(checks)
    if rows:
        print_generation(rows)
    document = {
        "config": asdict(config) | {"json_path": str(config.json_path)},
        "results": [asdict(r) for r in results],
        "targets": checks,
        "during_generation": [asdict(r) for r in rows],
        "seconds": time.monotonic() - started,
    }
    summary = summary_line(results, checks, rows)
    common.finish("todos", machine, document, summary, config.json_path)
    return 1 if any(r.errors for r in results) or any(r.errors for r in rows) else 0


def main(argv: Sequence[str] | None = None) -> int:
    return common.main(parse_args, run, argv=argv)


if __name__ == "__main__":
    sys.exit(main())
