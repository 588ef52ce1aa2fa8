"""CPU per todo request in each server process: the service's gunicorn worker beside the
Express + Mongoose peer, and the database server under each, at the same concurrency.

Why it exists: bench/todos_bench.py compares requests per second on this machine, where its
client (Python `requests`, the costliest of the three parts), the database server and the
server under test share the cores, so the client's own cost hides part of what separates the
servers. This one reads what each server process itself spent (user and system CPU from
/proc, over a timed window) per request, under a light client (http.client threads), so the
servers' costs compare directly. `GET /health` on the service is its HTTP and Django stack
without the database.

    .venv/bin/python bench/todo_server_cpu_bench.py [--seconds 10] [--rounds 2] [--quick]
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import sys
import threading
import time
import uuid
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.common import install_signal_handlers, machine_info, percentile  # noqa: E402
from bench.peers.runner import express_mongoose  # noqa: E402
from bench.todos_bench import PEER_DB, running_service, seed_todos  # noqa: E402
from tests.support.processes import free_port  # noqa: E402

DEFAULT_JSON = ROOT / "bench" / "results" / "todo_server_cpu.json"
TICK_US = 1e6 / os.sysconf("SC_CLK_TCK")

# One request on a connection: (method, path, body); answers whether it got a 2xx.
Request = Callable[[http.client.HTTPConnection], bool]


def cpu_ticks(pid: int) -> tuple[int, int]:
    """User and system CPU of a process (all its threads) so far, in clock ticks."""
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return int(fields[11]), int(fields[12])


def listening_pids(port: int) -> list[int]:
    """The processes holding the listening TCP socket on 127.0.0.1:`port` (a gunicorn master
    and its worker both hold it)."""
    inodes = set()
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        fields = line.split()
        if fields[1].endswith(f":{port:04X}") and fields[3] == "0A":
            inodes.add(f"socket:[{fields[9]}]")
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if any(os.readlink(fd) in inodes for fd in (entry / "fd").iterdir()):
                pids.append(int(entry.name))
        except OSError:  # gone meanwhile, or not ours
            continue
    return pids


def serving_pid(port: int) -> int:
    """The process that answers on `port`: of a gunicorn master and its worker, the worker
    (the one whose parent holds the socket too)."""
    pids = listening_pids(port)
    for pid in pids:
        parent = int(Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[1])
        if parent in pids:
            return pid
    if len(pids) != 1:
        raise RuntimeError(f"no single process listens on port {port}: {pids}")
    return pids[0]


def exchange(method: str, path: str, body: str | None = None) -> Request:
    headers = {"Content-Type": "application/json"} if body is not None else {}

    def send(connection: http.client.HTTPConnection) -> bool:
        connection.request(method, path, body, headers)
        response = connection.getresponse()
        response.read()
        return 200 <= response.status < 300

    return send


def get(path_of: Callable[[int], str]) -> Callable[[int], Request]:
    return lambda index: exchange("GET", path_of(index))


def create(prefix: str) -> Callable[[int], Request]:
    def request_for(index: int) -> Request:
        todo = {"title": f"{prefix}{index}"[:40], "description": "cpu"}
        return exchange("POST", "/todo", json.dumps({"todo": todo}))

    return request_for


@dataclass
class Row:
    server: str
    operation: str
    requests: int
    rps: float
    p50_ms: float
    p99_ms: float
    server_user_us: float
    server_system_us: float
    server_total_us: float
    database_us: float
    errors: int


def measure(
    port: int, server_pid: int, database_pid: int, request_for: Callable[[int], Request],
    *, seconds: float, concurrency: int, counter: list[int],
) -> tuple[int, float, list[float], int, tuple[int, int], int]:  # fmt: skip
    """Requests from `concurrency` keep-alive threads for `seconds`; what the server and the
    database spent meanwhile."""
    latencies: list[float] = []
    errors = [0]
    lock = threading.Lock()
    stop_at = time.perf_counter() + seconds

    def client() -> None:
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        try:
            while time.perf_counter() < stop_at:
                with lock:
                    index = counter[0]
                    counter[0] += 1
                started = time.perf_counter()
                ok = request_for(index)(connection)
                elapsed = (time.perf_counter() - started) * 1000
                with lock:
                    latencies.append(elapsed)
                    errors[0] += not ok
        finally:
            connection.close()

    threads = [threading.Thread(target=client) for _ in range(concurrency)]
    server_before, database_before = cpu_ticks(server_pid), sum(cpu_ticks(database_pid))
    started = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    elapsed = time.perf_counter() - started
    server_after, database_after = cpu_ticks(server_pid), sum(cpu_ticks(database_pid))
    server = (server_after[0] - server_before[0], server_after[1] - server_before[1])
    return len(latencies), elapsed, latencies, errors[0], server, database_after - database_before


def row(server: str, operation: str, samples: list[tuple]) -> Row:
    """Several rounds of `measure` pooled."""
    count = max(1, sum(s[0] for s in samples))  # none answered: every figure per one request
    seconds = sum(s[1] for s in samples)
    latencies = sorted(ms for s in samples for ms in s[2])
    user = sum(s[4][0] for s in samples) * TICK_US / count
    system = sum(s[4][1] for s in samples) * TICK_US / count
    return Row(
        server=server, operation=operation, requests=count, rps=count / seconds,
        p50_ms=percentile(latencies, 0.5), p99_ms=percentile(latencies, 0.99),
        server_user_us=user, server_system_us=system, server_total_us=user + system,
        database_us=sum(s[5] for s in samples) * TICK_US / count,
        errors=sum(s[3] for s in samples),
    )  # fmt: skip


def todo_ids(port: int) -> list[str]:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    connection.request("GET", "/todos")
    return [todo["id"] for todo in json.loads(connection.getresponse().read())["data"]]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=10.0, help="per operation and round (10)")
    parser.add_argument("--rounds", type=int, default=2, help="rounds, pooled (2)")
    parser.add_argument("--concurrency", type=int, default=8, help="client threads (8)")
    parser.add_argument("--json", type=Path, default=DEFAULT_JSON, help="where to write results")
    parser.add_argument("--quick", action="store_true", help="one round of 2 s (a smoke run)")
    args = parser.parse_args(argv)
    if args.quick:
        args.seconds, args.rounds = 2.0, 1
    if args.seconds <= 0 or args.rounds < 1 or args.concurrency < 1:
        parser.error("--seconds, --rounds and --concurrency must be positive")
    install_signal_handlers()
    machine = machine_info()
    print(f"machine: nproc {machine['nproc']} | {machine['cpu']} | python {machine['python']}")
    print(f"load average at start: {machine['load_average_at_start']}")
    samples: dict[tuple[str, str], list[tuple]] = {}
    with ExitStack() as stack:
        service = stack.enter_context(running_service())
        peer_url = stack.enter_context(express_mongoose(
            service.mongo_uri(PEER_DB), free_port(), service.data_dir / "peer.log"
        ))  # fmt: skip
        database_pid = serving_pid(service.db_port)
        servers = {}
        for name, url in (("service", service.base_url), ("peer", peer_url)):
            seed_todos(url, 100)
            port = int(url.rsplit(":", 1)[1])
            ids = todo_ids(port)
            operations = {
                "get": get(lambda i, ids=ids: f"/todo/{ids[i % len(ids)]}"),
                "create": create(f"cpu-{uuid.uuid4().hex[:8]}-"),
            }
            if name == "service":
                operations["GET /health"] = get(lambda i: "/health")
            servers[name] = (port, serving_pid(port), operations)
        counter = [0]
        for round_number in range(args.rounds + 1):  # the first round warms up
            for name, (port, pid, operations) in servers.items():
                for operation, request_for in operations.items():
                    sample = measure(
                        port, pid, database_pid, request_for,
                        seconds=args.seconds if round_number else 2.0,
                        concurrency=args.concurrency, counter=counter,
                    )  # fmt: skip
                    if round_number:
                        samples.setdefault((name, operation), []).append(sample)
    rows = [row(name, operation, pooled) for (name, operation), pooled in samples.items()]
    print(
        f"\n{'server':<8} {'operation':<12} {'rps':>6} {'p50 ms':>7} {'p99 ms':>7} "
        f"{'server CPU us/request (user + sys)':>36} {'database us':>12}"
    )
    for r in rows:
        cpu = f"{r.server_total_us:.0f} ({r.server_user_us:.0f} + {r.server_system_us:.0f})"
        print(
            f"{r.server:<8} {r.operation:<12} {r.rps:>6.0f} {r.p50_ms:>7.2f} {r.p99_ms:>7.2f} "
            f"{cpu:>36} {r.database_us:>12.0f}"
        )
    by = {(r.server, r.operation): r for r in rows}
    ratios = {
        op: by[("service", op)].server_total_us / max(by[("peer", op)].server_total_us, 1e-9)
        for op in ("get", "create")
    }
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps({
        "benchmark": "todo_server_cpu", "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": machine, "settings": vars(args) | {"json": str(args.json)},
        "rows": [asdict(r) for r in rows], "service_cpu_over_peer": ratios,
    }, indent=2) + "\n")  # fmt: skip
    print(
        "\nsummary: server CPU per request, service over peer: "
        + ", ".join(f"{op} {value:.2f}x" for op, value in ratios.items())
        + f" | service GET /health {by[('service', 'GET /health')].server_total_us:.0f} us, "
        f"peer get {by[('peer', 'get')].server_total_us:.0f} us | errors "
        f"{sum(r.errors for r in rows)}"
    )
    return 1 if any(r.errors for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
