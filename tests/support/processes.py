"""Real processes for the tests: the app under gunicorn, on a free loopback port."""

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import requests

ROOT = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for_http(url: str, timeout: float, process: subprocess.Popen | None = None) -> None:
    deadline = time.monotonic() + timeout
    while True:
        if process is not None and process.poll() is not None:
            raise RuntimeError(f"process exited with {process.returncode} before {url} answered")
        try:
            requests.get(url, timeout=1)
            return
        except requests.RequestException:
            if time.monotonic() > deadline:
                raise TimeoutError(f"{url} did not answer within {timeout}s") from None
            time.sleep(0.1)


def children(pid: int) -> list[tuple[int, str]]:
    """The processes `pid` started, still there: (pid, command line) each."""
    out = subprocess.run(["ps", "-o", "pid=,args=", "--ppid", str(pid)], capture_output=True)
    rows = [line.strip().split(None, 1) for line in out.stdout.decode().splitlines()]
    return [(int(row[0]), row[1]) for row in rows if len(row) == 2]


def alive(pid: int) -> bool:
    """Whether `pid` runs (a zombie, exited but not yet reaped, does not)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    stat = Path(f"/proc/{pid}/stat")
    return stat.exists() and stat.read_text().split()[2] != "Z"


# The job modes of the apps launched while the running test runs (tests/support/end_to_end.py).
launched_modes: set[str] = set()


def job_mode(env: dict[str, str]) -> str:
    return "distributed" if env.get("JOB_BROKER_URL") else "in-process"


# How long AppServer.stop waits for gunicorn's own stop before it ends the processes.
STOP_GRACE = 0.5


class AppServer:
    """The service under gunicorn with the project's own gunicorn config."""

    def __init__(self, env: dict[str, str], log_path: Path) -> None:
        self.port = free_port()
        self.base_url = f"http://127.0.0.1:{self.port}"
        self.log_path = log_path
        self.env = {
            **os.environ,
            "SECRET_KEY": "test-secret",
            "ALLOWED_HOSTS": "127.0.0.1,localhost",
            "ACCESS_LOG": "0",
            # The start-up import of the model code (about 3-7 s per start here) is tested on
            # its own (tests/imagegen/model/test_preload.py); the other starts skip it.
            "PRELOAD_MODEL_CODE": "0",
            # A test that ends with a request still open (an event stream, a long synchronous
            # generation) has the worker stopped 5 s later, not 30: the test is over, nothing
            # waits for that request's answer.
            "GUNICORN_GRACEFUL_TIMEOUT": "5",
            **env,
            "BIND": f"127.0.0.1:{self.port}",
        }
        self.process: subprocess.Popen | None = None

    def start(self, timeout: float = 60.0) -> "AppServer":
        return self.launch().wait_ready(timeout)

    def launch(self) -> "AppServer":
        """Starts the process without waiting for it (several start at once: Stack)."""
        launched_modes.add(job_mode(self.env))
        with self.log_path.open("ab") as log:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "gunicorn", "--config", "python:config.gunicorn"],
                cwd=ROOT, env=self.env, stdout=log, stderr=subprocess.STDOUT,
                start_new_session=True,  # its own process group, so kill() takes the worker too
            )  # fmt: skip
        return self

    def wait_ready(self, timeout: float = 60.0) -> "AppServer":
        try:
            wait_for_http(self.url("/health"), timeout, self.process)
        except Exception as exc:
            self.stop()
            raise RuntimeError(f"{exc}; log:\n{self.log_tail()}") from None
        return self

    def url(self, path: str) -> str:
        return self.base_url + path

    def log_tail(self, lines: int = 40) -> str:
        text = self.log_path.read_text(errors="replace") if self.log_path.exists() else ""
        return "\n".join(text.splitlines()[-lines:])

    def stop(self, grace: float = STOP_GRACE) -> None:
        """Asks gunicorn to stop (SIGTERM), and ends its process group after `grace` seconds.
        A worker with a model loaded takes about 2 s more to tear its interpreter down, which
        no test reads; a test of a graceful stop passes a longer `grace`."""
        if self.process is None or self.process.poll() is not None:
            return
        self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(grace)
        except subprocess.TimeoutExpired:
            self.kill()

    def kill(self) -> None:
        """Kills gunicorn and its worker at once, as a crash or an OOM kill would."""
        if self.process is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait()

    def __enter__(self) -> "AppServer":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
