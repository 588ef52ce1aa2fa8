"""Where a todo request's time goes inside the service's process, one request at a time.

Why it exists: bench/todos_bench.py measures the service over HTTP under load, where its
client, the database server and the service share this machine's cores, so a request's CPU
decides the rate. This splits one request's cost without an HTTP server: Django's test client
calls the WSGI application in this process (every middleware, Ninja's routing and response
schema, the driver) against the embedded database server, beside the driver's own `find_one`
of the same todo (the baseline) and `GET /health` (the stack without the database). What
`GET /todo/<id>` costs beyond `find_one` is Django, Ninja and the schema; what the HTTP bench
adds beyond this is the HTTP server and the client.

    .venv/bin/python bench/todo_request_cost_bench.py [--requests 2000]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench import common  # noqa: E402
from scripts.embedded_mongo import EmbeddedMongo  # noqa: E402
from tests.support.processes import free_port  # noqa: E402


def microseconds_each(call: Callable[[], object], count: int) -> float:
    """Per call: the median of five rounds of `count / 5` calls each."""
    rounds = []
    for _ in range(5):
        started = time.perf_counter()
        for _ in range(count // 5):
            call()
        rounds.append((time.perf_counter() - started) / (count // 5) * 1e6)
    return common.median(rounds)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=2000, help="calls per row (2000)")
    parser.add_argument("--json", type=Path, help="where to write results")
    args = parser.parse_args(argv)
    if args.requests < 5:
        parser.error("--requests must be at least 5 (five rounds)")
    machine = common.machine_info()
    common.print_machine(machine)
    with (
        tempfile.TemporaryDirectory() as scratch,
        EmbeddedMongo(Path(scratch) / "mongo", port=free_port()) as database,
    ):
        os.environ.update(
            DJANGO_SETTINGS_MODULE="config.settings", SECRET_KEY="bench",
            MONGODB_URI=database.uri("bench"), PRELOAD_MODEL_CODE="0", ACCESS_LOG="0",
            ALLOWED_HOSTS="testserver", LOG_LEVEL="ERROR", API_TOKEN="bench-token",
        )  # fmt: skip
        import django

        django.setup()
        from bson import ObjectId
        from django.test import Client

        from todos.documents import todos_collection

        client = Client(HTTP_AUTHORIZATION="Bearer bench-token")
        created = client.post(
            "/todo", {"todo": {"title": "cost", "description": "d"}}, "application/json"
        )
        assert created.status_code == 201, created.content
        todo_id = created.json()["data"]["id"]
        collection = todos_collection()
        rows = {
            "driver find_one (baseline)": lambda: collection.find_one({"_id": ObjectId(todo_id)}),
            "GET /todo/<id>": lambda: client.get(f"/todo/{todo_id}"),
            "GET /health": lambda: client.get("/health"),
        }
        for call in rows.values():  # warm-up: imports, connections, caches
            for _ in range(200):
                call()
        figures = {name: microseconds_each(call, args.requests) for name, call in rows.items()}
    baseline = figures["driver find_one (baseline)"]
    print(f"\n{'per request, in process':<28} {'us':>8} {'vs find_one':>12}")
    for name, value in figures.items():
        print(f"{name:<28} {value:>8.0f} {value / baseline:>11.2f}x")
    stack = figures["GET /todo/<id>"] - baseline
    print(f"\nDjango, Ninja and the schema around the read: {stack:.0f} us a request")
    path = common.write_json(
        "todo_request_cost", {"machine": machine, "microseconds": figures}, args.json
    )
    print(f"results written to {path}")
    print(
        f"summary: GET /todo/<id> {figures['GET /todo/<id>']:.0f} us in process, "
        f"find_one {baseline:.0f} us, /health {figures['GET /health']:.0f} us"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
