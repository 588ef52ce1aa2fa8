"""Benchmark of the todo API: create, get and list under concurrent keep-alive clients.

Why it exists: raw requests per second say little on their own, because they depend on the
machine. So one run starts the real service exactly as `./scripts/serve` does (embedded
database, gunicorn with the project's config) and measures, beside the API operations, two
floors on the same machine at the same concurrency:

- the HTTP floor: GET /health on the same server, which touches no database;
- the database floor: the same three operations done directly with pymongo against the same
  embedded database.

Each API figure is then also given as a ratio to both floors, which is what stays comparable
between machines and tells where the time of a request goes.

    .venv/bin/python bench/todos_bench.py            # about 80 s on 2 cores
    .venv/bin/python bench/todos_bench.py --quick    # a smaller run
"""

import argparse
import json
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
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import requests
from bson import ObjectId
from pymongo import ASCENDING, MongoClient
from pymongo.collection import Collection

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.common import (  # noqa: E402
    Interrupted,
    install_signal_handlers,
    machine_info,
    percentile,
)
from tests.support.processes import free_port  # noqa: E402

DEFAULT_JSON = ROOT / "bench" / "results" / "todos.json"
BATCH_MAX = 1000  # PATCH /todos accepts 1 to 1000 todos
SCRATCH_DB = "todos_bench_scratch"

# An operation is called once per work item with the state of its thread (a requests.Session
# for HTTP, a collection for the database) and answers whether it succeeded (2xx for HTTP).
Operation = Callable[[Any, Any], bool]


@dataclass
class Result:
    name: str
    kind: str  # "api", "http floor" or "db floor"
    requests: int
    concurrency: int
    seconds: float
    rps: float
    p50_ms: float
    p99_ms: float
    errors: int
    ratio_to_db: float | None = None
    ratio_to_http: float | None = None


@dataclass
class Config:
    requests: int
    concurrency: int
    list_size: int
    warmup: int
    json_path: Path
    quick: bool


# --- the service -----------------------------------------------------------------------------


def service_env(data_dir: Path, http_port: int, db_port: int) -> dict[str, str]:
    env = {key: value for key, value in os.environ.items() if key != "MONGODB_URI"}
    env.update(
        DATA_DIR=str(data_dir),
        BIND=f"127.0.0.1:{http_port}",
        EMBEDDED_DB_PORT=str(db_port),
        ACCESS_LOG="0",
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
    mongo_uri: str
    data_dir: Path


@contextmanager
def running_service() -> Iterator[Service]:
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
                cwd=ROOT, env=service_env(data_dir, http_port, db_port),
                stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
            )  # fmt: skip
        base_url = f"http://127.0.0.1:{http_port}"
        wait_for_health(base_url + "/health", process, log_path, timeout=90)
        mongo_uri = f"mongodb://127.0.0.1:{db_port}/{SCRATCH_DB}?retryWrites=false"
        yield Service(base_url=base_url, mongo_uri=mongo_uri, data_dir=data_dir)
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


def measure(
    name: str,
    kind: str,
    items: Sequence[Any],
    warmup_items: Sequence[Any],
    operation: Operation,
    make_state: Callable[[], Any],
    concurrency: int,
) -> Result:
    """Warms the operation up on warmup_items (not counted), then times it over items."""
    if warmup_items:
        run_load(warmup_items, operation, make_state, concurrency)
    seconds, latencies, errors = run_load(items, operation, make_state, concurrency)
    latencies.sort()
    result = Result(
        name=name,
        kind=kind,
        requests=len(items),
        concurrency=concurrency,
        seconds=round(seconds, 3),
        rps=len(items) / seconds,
        p50_ms=percentile(latencies, 0.50),
        p99_ms=percentile(latencies, 0.99),
        errors=errors,
    )
    print(
        f"  {kind:<10} {name:<7} {result.rps:8.0f} rps  p50 {result.p50_ms:6.2f} ms  "
        f"p99 {result.p99_ms:7.2f} ms  errors {errors}",
        flush=True,
    )
    return result


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
        raise RuntimeError(f"seeded {count} todos but GET /todos returns {stored}")


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
    """The plain read of list_size documents; GET /todos also filters out pending todos and
    sorts by createdAt and id, which costs the database more than this floor does."""

    def operation(collection: Collection, _item: object) -> bool:
        return len(list(collection.find().limit(list_size))) == list_size

    return operation


def scratch_collection(client: MongoClient, name: str) -> Collection:
    collection = client[SCRATCH_DB][name]
    collection.drop()
    collection.create_index([("title", ASCENDING)], unique=True)
    return collection


# --- the benchmark ---------------------------------------------------------------------------


def measure_health(service: Service, config: Config) -> Result:
    return measure(
        "health", "http floor",
        items=["/health"] * config.requests,
        warmup_items=["/health"] * config.warmup,
        operation=http_get(service.base_url),
        make_state=requests.Session,
        concurrency=config.concurrency,
    )  # fmt: skip


def measure_create(
    service: Service, client: MongoClient, config: Config
) -> tuple[Result, Result, list[str]]:
    inserts = scratch_collection(client, "inserts")
    db = measure(
        "create", "db floor",
        items=titles("db", config.requests),
        warmup_items=titles("dbwarm", config.warmup),
        operation=db_insert,
        make_state=lambda: inserts,
        concurrency=config.concurrency,
    )  # fmt: skip
    created: list[str] = []
    api = measure(
        "create", "api",
        items=titles("api", config.requests),
        warmup_items=titles("apiwarm", config.warmup),
        operation=http_create(service.base_url, created),
        make_state=requests.Session,
        concurrency=config.concurrency,
    )  # fmt: skip
    return db, api, created


def measure_get(
    service: Service, client: MongoClient, config: Config, created: Sequence[str]
) -> tuple[Result, Result]:
    inserts = client[SCRATCH_DB]["inserts"]
    object_ids = [doc["_id"] for doc in inserts.find({}, {"_id": 1})]
    db = measure(
        "get", "db floor",
        items=cycle(object_ids, config.requests),
        warmup_items=cycle(object_ids[::-1], config.warmup),
        operation=db_find_one,
        make_state=lambda: inserts,
        concurrency=config.concurrency,
    )  # fmt: skip
    paths = [f"/todo/{todo_id}" for todo_id in created]
    api = measure(
        "get", "api",
        items=cycle(paths, config.requests),
        warmup_items=cycle(paths[::-1], config.warmup),
        operation=http_get(service.base_url),
        make_state=requests.Session,
        concurrency=config.concurrency,
    )  # fmt: skip
    return db, api


def measure_list(service: Service, client: MongoClient, config: Config) -> tuple[Result, Result]:
    listed = scratch_collection(client, "listed")
    listed.insert_many([todo_document(title) for title in titles("dblist", config.list_size)])
    db = measure(
        "list", "db floor",
        items=[None] * config.requests,
        warmup_items=[None] * config.warmup,
        operation=db_find_many(config.list_size),
        make_state=lambda: listed,
        concurrency=config.concurrency,
    )  # fmt: skip
    seed_todos(service.base_url, config.list_size)
    api = measure(
        "list", "api",
        items=["/todos"] * config.requests,
        warmup_items=["/todos"] * config.warmup,
        operation=http_get(service.base_url),
        make_state=requests.Session,
        concurrency=config.concurrency,
    )  # fmt: skip
    return db, api


def run_benchmark(service: Service, config: Config) -> list[Result]:
    """Each API operation right after its database floor, so both see the same conditions."""
    client: MongoClient = MongoClient(
        service.mongo_uri, maxPoolSize=config.concurrency + 2, serverSelectionTimeoutMS=10_000
    )
    try:
        health = measure_health(service, config)
        db_create, api_create, created = measure_create(service, client, config)
        db_get, api_get = measure_get(service, client, config, created)
        db_list, api_list = measure_list(service, client, config)
        client.drop_database(SCRATCH_DB)
    finally:
        client.close()
    for api, db in ((api_create, db_create), (api_get, db_get), (api_list, db_list)):
        api.ratio_to_db = api.rps / db.rps
        api.ratio_to_http = api.rps / health.rps
    return [health, db_create, db_get, db_list, api_create, api_get, api_list]


# --- output ----------------------------------------------------------------------------------


def print_header(machine: dict[str, str | int], config: Config) -> None:
    print(f"machine: nproc {machine['nproc']} | {machine['cpu']} | python {machine['python']}")
    print(
        f"run: concurrency {config.concurrency} | {config.requests} requests per operation | "
        f"list size {config.list_size} todos | "
        f"warm-up {config.warmup} requests{' | quick' if config.quick else ''}"
    )


def ratio(value: float | None) -> str:
    return "" if value is None else f"{value:.2f}x"


def print_table(results: Sequence[Result]) -> None:
    header = (
        f"{'kind':<10} {'operation':<9} {'requests':>8} {'rps':>8} {'p50 ms':>8} {'p99 ms':>8} "
        f"{'errors':>6} {'vs db':>7} {'vs http':>7}"
    )
    print()
    print(header)
    print("-" * len(header))
    for r in results:
        print(
            f"{r.kind:<10} {r.name:<9} {r.requests:>8} {r.rps:>8.0f} {r.p50_ms:>8.2f} "
            f"{r.p99_ms:>8.2f} {r.errors:>6} {ratio(r.ratio_to_db):>7} {ratio(r.ratio_to_http):>7}"
        )
    print()


def summary_line(results: Sequence[Result]) -> str:
    parts = [
        f"{r.name} {r.rps:.0f} rps ({ratio(r.ratio_to_db)} db, {ratio(r.ratio_to_http)} http)"
        for r in results
        if r.kind == "api"
    ]
    errors = sum(r.errors for r in results)
    return f"summary: {' | '.join(parts)} | errors {errors}"


def write_json(
    path: Path, machine: dict[str, str | int], config: Config, results: list[Result]
) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    document = {
        "benchmark": "todos",
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": machine,
        "config": {
            "concurrency": config.concurrency,
            "requests": config.requests,
            "list_size": config.list_size,
            "warmup": config.warmup,
            "quick": config.quick,
        },
        "results": [asdict(r) for r in results],
    }
    path.write_text(json.dumps(document, indent=2) + "\n")


# --- entry point -----------------------------------------------------------------------------


def parse_args(argv: Sequence[str] | None = None) -> Config:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--concurrency", type=int, default=8, help="client threads (8)")
    parser.add_argument(
        "--requests", type=int, help="requests per operation (2000; 300 with --quick)"
    )
    parser.add_argument("--list-size", type=int, default=100, help="todos stored for list (100)")
    parser.add_argument("--json", type=Path, default=DEFAULT_JSON, help="where to write results")
    parser.add_argument("--quick", action="store_true", help="a smaller run")
    args = parser.parse_args(argv)
    count = args.requests or (300 if args.quick else 2000)
    if count < 1 or args.concurrency < 1 or args.list_size < 1:
        parser.error("--requests, --concurrency and --list-size must be positive")
    return Config(
        requests=count,
        concurrency=args.concurrency,
        list_size=args.list_size,
        warmup=max(args.concurrency * 5, count // 20),
        json_path=args.json,
        quick=args.quick,
    )


def main(argv: Sequence[str] | None = None) -> int:
    config = parse_args(argv)
    install_signal_handlers()
    machine = machine_info()
    print_header(machine, config)
    started = time.monotonic()
    try:
        print("starting the service (scripts/serve.py, embedded database)...", flush=True)
        with running_service() as service:
            print(f"service at {service.base_url}; measuring:", flush=True)
            results = run_benchmark(service, config)
    except Interrupted:
        print("\ninterrupted; the service was stopped", file=sys.stderr)
        return 130
    print_table(results)
    write_json(config.json_path, machine, config, results)
    print(f"results written to {config.json_path} ({time.monotonic() - started:.0f}s in all)")
    print(summary_line(results))
    return 1 if any(r.errors for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())
