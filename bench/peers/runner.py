"""Starts a peer implementation of the todo seed for bench/todos_bench.py.

A peer is the stack a user would otherwise run for the same seed; measuring it in the same run,
against the same database server and at the same concurrency, says what the service's figures
are worth. Only Express + Mongoose exists (bench/peers/express-mongoose): its exact versions
are pinned in package.json and package-lock.json, and `npm ci` installs them the first time.
"""

import os
import shutil
import signal
import subprocess
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

EXPRESS_MONGOOSE = Path(__file__).resolve().parent / "express-mongoose"


class PeerError(RuntimeError):
    pass


def ensure_installed(directory: Path, log_path: Path) -> None:
    """`npm ci` into the peer's node_modules (git-ignored) when it is missing."""
    if (directory / "node_modules").is_dir():
        return
    if shutil.which("npm") is None or shutil.which("node") is None:
        raise PeerError("node and npm are needed for the peer (or pass --no-peer)")
    with log_path.open("ab") as log:
        done = subprocess.run(
            ["npm", "ci", "--no-audit", "--no-fund"], cwd=directory,
            stdout=log, stderr=subprocess.STDOUT, timeout=600,
        )  # fmt: skip
    if done.returncode != 0:
        raise PeerError(f"npm ci failed in {directory}; see {log_path}")


@contextmanager
def express_mongoose(mongo_uri: str, port: int, log_path: Path) -> Iterator[str]:
    """The peer's base URL while it runs, on `mongo_uri`; stopped (SIGTERM) on exit."""
    ensure_installed(EXPRESS_MONGOOSE, log_path)
    env = {**os.environ, "PORT": str(port), "MONGODB_URI": mongo_uri, "NODE_ENV": "production"}
    process = subprocess.Popen(
        ["node", "server.js"], cwd=EXPRESS_MONGOOSE, env=env, text=True,
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True,
    )  # fmt: skip
    try:
        _wait_until_listening(process, log_path, timeout=60)
        yield f"http://127.0.0.1:{port}"
    finally:
        _stop(process)


def _wait_until_listening(process: subprocess.Popen, log_path: Path, timeout: float) -> None:
    """Reads the peer's output until it says it listens; the rest goes to log_path."""
    assert process.stdout is not None
    ready = threading.Event()

    def copy_output() -> None:
        with log_path.open("a") as log:
            for line in process.stdout:
                log.write(line)
                log.flush()
                if line.startswith("listening on"):
                    ready.set()

    threading.Thread(target=copy_output, name="peer-output", daemon=True).start()
    if not ready.wait(timeout):
        _stop(process)
        raise PeerError(f"the peer did not start within {timeout:.0f}s; see {log_path}")


def _stop(process: subprocess.Popen) -> None:
    if process.poll() is not None:
        return
    process.send_signal(signal.SIGTERM)
    try:
        process.wait(15)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()
