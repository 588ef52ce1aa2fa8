"""Real parts of distributed mode for the tests: Debian's redis-server on a free port with its
data in a temporary folder, and Celery workers (`manage.py run_worker`) as processes."""

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import kombu.pools
import redis

from tests.support.processes import ROOT, free_port

REDIS_SERVER = shutil.which("redis-server") or "/usr/bin/redis-server"


class RedisServer:
    """A redis-server of its own. `persistent` keeps its data in an append-only file fsynced
    at every write, so a stop and a start on the same port and folder lose nothing."""

    def __init__(self, data_dir: Path, *, persistent: bool = False) -> None:
        self.port = free_port()
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.data_dir = data_dir
        self.persistent = persistent
        self.process: subprocess.Popen | None = None

    def start(self, timeout: float = 20) -> "RedisServer":
        self.data_dir.mkdir(parents=True, exist_ok=True)
        durability = ["--appendonly", "yes", "--appendfsync", "always"] if self.persistent else []
        with (self.data_dir / "redis.log").open("ab") as log:
            self.process = subprocess.Popen(
                [REDIS_SERVER, "--port", str(self.port), "--bind", "127.0.0.1",
                 "--dir", str(self.data_dir), "--save", "", *durability],
                stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
            )  # fmt: skip
        client = self.client()
        deadline = time.monotonic() + timeout
        while True:
            try:
                client.ping()
                return self
            except redis.ConnectionError:
                if self.process.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"redis-server did not start on {self.port}") from None
                time.sleep(0.05)

    def client(self) -> redis.Redis:
        return redis.Redis.from_url(self.url, socket_timeout=5)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(20)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()

    @contextlib.contextmanager
    def frozen(self) -> Iterator[None]:
        """The process stopped (SIGSTOP) while the block runs: connections open, nothing
        answered, as a hung Redis."""
        assert self.process is not None
        os.kill(self.process.pid, signal.SIGSTOP)
        try:
            yield
        finally:
            os.kill(self.process.pid, signal.SIGCONT)

    def __enter__(self) -> "RedisServer":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


class WorkerProcess:
    """`manage.py run_worker` with the given settings, started and seen beating."""

    def __init__(
        self, env: dict[str, str], log_path: Path, name: str, *, prefix: list[str] = ()
    ) -> None:
        self.name = name
        self.prefix = list(prefix)  # e.g. taskset, for a worker's share of the cores
        self.log_path = log_path
        self.env = {
            **os.environ,
            "SECRET_KEY": "test-secret",
            "PRELOAD_MODEL_CODE": "0",
            "TORCH_THREADS": "1",
            **env,
        }
        self.process: subprocess.Popen | None = None

    def start(self, timeout: float = 60) -> "WorkerProcess":
        return self.launch().wait_ready(timeout)

    def launch(self) -> "WorkerProcess":
        """Starts the process without waiting for it (several start at once: Stack)."""
        with self.log_path.open("ab") as log:
            self.process = subprocess.Popen(
                [*self.prefix, sys.executable, "manage.py", "run_worker", "--name", self.name],
                cwd=ROOT, env=self.env, stdout=log, stderr=subprocess.STDOUT,
                start_new_session=True,
            )  # fmt: skip
        return self

    def wait_ready(self, timeout: float = 60) -> "WorkerProcess":
        client = redis.Redis.from_url(self.env["JOB_BROKER_URL"])
        deadline = time.monotonic() + timeout
        # Beating, and its Celery consumer ready (it says so in its log).
        while not (client.exists(f"imagegen:worker:{self.name}") and b"ready." in self.log()):
            if self.process.poll() is not None or time.monotonic() > deadline:
                self.kill()
                raise RuntimeError(f"worker {self.name} did not start:\n{self.log_tail()}")
            time.sleep(0.1)
        return self

    def state(self, client: redis.Redis) -> dict | None:
        value = client.get(f"imagegen:worker:{self.name}")
        return json.loads(value) if value else None

    def log(self) -> bytes:
        return self.log_path.read_bytes() if self.log_path.exists() else b""

    def log_tail(self, lines: int = 40) -> str:
        return "\n".join(self.log().decode(errors="replace").splitlines()[-lines:])

    def stop(self) -> None:
        if self.process is None or self.process.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGTERM)
        try:
            self.process.wait(30)
        except subprocess.TimeoutExpired:
            self.kill()

    def kill(self) -> None:
        """SIGKILL, as an out-of-memory kill or a lost node would end it."""
        if self.process is not None and self.process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait()


class Stack:
    """Redis, web replicas (the app under gunicorn) and workers, all on one share and one
    Redis: the distributed layout on one machine."""

    def __init__(self, env: dict[str, str], work: Path, *, persistent: bool = False) -> None:
        self.work = work
        self.redis = RedisServer(work / "redis", persistent=persistent)
        self.env = {**env, "JOB_BROKER_URL": self.redis.url}
        self.apps: list = []
        self.workers: list[WorkerProcess] = []

    def start(self, *, replicas: int = 1, workers: int = 1) -> "Stack":
        from tests.support.processes import AppServer

        try:
            self.redis.start()
            # All processes start at once and are then waited for: their imports overlap
            # with each other's waits.
            started = [self._worker(n).launch() for n in range(workers)]
            for n in range(replicas):
                app = AppServer(self.env, self.work / f"web-{n}.log")
                self.apps.append(app)
                started.append(app.launch())
            for process in started:
                process.wait_ready()
        except BaseException:
            self.stop()
            raise
        return self

    def replica(self, log_path: Path, **env: str):
        """A web replica of its own settings (e.g. GEN_QUEUE_MAX, API_TOKEN: what the web side
        reads) on this stack's Redis, workers and share; `with` starts and stops it."""
        from tests.support.processes import AppServer

        app = AppServer({**self.env, **env}, log_path)
        self.apps.append(app)
        return app

    def add_worker(self, n: int, **env: str) -> WorkerProcess:
        return self._worker(n, **env).start()

    def launch_worker(self, n: int, **env: str) -> WorkerProcess:
        """Started, not waited for (one expected to fail its start)."""
        return self._worker(n, **env).launch()

    def add_workers(self, *numbers: int) -> None:
        """Several workers, started at once (their imports overlap) and waited for."""
        for worker in [self._worker(n).launch() for n in numbers]:
            worker.wait_ready()

    def _worker(self, n: int, **env: str) -> WorkerProcess:
        worker = WorkerProcess({**self.env, **env}, self.work / f"worker-{n}.log", f"w{n}")
        self.workers.append(worker)
        return worker

    def stop(self) -> None:
        # Each process's graceful stop takes about a second: they are stopped together.
        with ThreadPoolExecutor() as pool:
            list(pool.map(lambda process: process.stop(), [*self.apps, *self.workers]))
        self.redis.stop()

    def __enter__(self) -> "Stack":
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


@contextlib.contextmanager
def _broker_of_its_own(url: str, timeout_ms: int) -> Iterator[None]:
    """The Celery app's broker pointed at `url` for the block, and back after it: its URL and
    options come from settings at import, so a web replica served here would otherwise send
    its messages to the Redis an earlier test's replica used. (The Redis clients are the
    backend's own, built with it.)"""
    from imagegen.distributed.celery_app import app

    def fresh(broker_url: str, options: dict) -> None:
        # Its broker connections and producers, made again at the next send (what Celery
        # does in a forked child: Celery._after_fork), kombu's pools by connection included
        # (a block on the URL of an earlier one would be given that one's closed pool).
        pool = app.__dict__.get("_pool")
        if pool is not None:
            pool.force_close_all()
        app._after_fork()
        kombu.pools.reset()
        app.conf.broker_url, app.conf.broker_transport_options = broker_url, options

    before = (app.conf.broker_url, dict(app.conf.broker_transport_options))
    fresh(url, {**before[1], "socket_timeout": max(2.0, timeout_ms / 1000)})
    try:
        yield
    finally:
        fresh(*before)


@contextlib.contextmanager
def replica_here(**env: str) -> Iterator:
    """A web replica of distributed mode (`env` with JOB_BROKER_URL) served in this process
    (tests/support/in_process.py `served_here`) on a broker of its own, its change feed's
    listener stopped at the end: for tests whose point is the routes' and the job store's
    behaviour on the web side, the workers staying processes."""
    from tests.support.in_process import served_here

    timeout_ms = int(env.get("JOB_STORE_TIMEOUT_MS", "5000"))  # config/settings.py's default
    with _broker_of_its_own(env["JOB_BROKER_URL"], timeout_ms), served_here(**env) as app:
        try:
            yield app
        finally:
            changes = getattr(app.backend.jobs, "changes", None) if app.backend else None
            if changes is not None:
                changes.close()
