"""The run command's embedded database keeps todos across restarts and stops with the service."""

import os
import signal
import subprocess
import sys
import time

import pytest
import requests

from tests.support.processes import ROOT, free_port, wait_for_http


@pytest.fixture
def empty_todos() -> None:
    """The package's emptying of the session's app (tests/todos/conftest.py), not wanted here:
    these tests bring databases of their own, and the session's app would start for nothing."""


def serve(data_dir, port, db_port) -> subprocess.Popen:
    env = {k: v for k, v in os.environ.items() if k != "MONGODB_URI"}
    env.update(
        DATA_DIR=str(data_dir),
        BIND=f"127.0.0.1:{port}",
        EMBEDDED_DB_PORT=str(db_port),
        ACCESS_LOG="0",
        # The start-up import of the model code (3-7 s a start here) is tested on its own
        # (tests/imagegen/model/test_preload.py); these todos never touch it.
        PRELOAD_MODEL_CODE="0",
    )
    env.pop("SECRET_KEY", None)  # the launcher makes one
    process = subprocess.Popen([sys.executable, "scripts/serve.py"], cwd=ROOT, env=env)
    wait_for_http(f"http://127.0.0.1:{port}/health", 60, process)
    return process


def stop(process: subprocess.Popen) -> int:
    process.send_signal(signal.SIGTERM)
    return process.wait(60)


def database_processes(db_port: int) -> list[str]:
    out = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True).stdout
    return [line for line in out.splitlines() if "secantus" in line and f"--port {db_port}" in line]


def test_todos_survive_a_restart_of_the_run_command(tmp_path):
    port, db_port = free_port(), free_port()
    base = f"http://127.0.0.1:{port}"

    first = serve(tmp_path, port, db_port)
    try:
        created = requests.post(base + "/todo", json={"todo": {"title": "persist"}}, timeout=10)
        assert created.status_code == 201
    finally:
        assert stop(first) == 0
    time.sleep(0.5)
    assert database_processes(db_port) == []
    assert (tmp_path / "mongo").is_dir() and (tmp_path / "secret_key").is_file()

    second = serve(tmp_path, port, db_port)
    try:
        listed = requests.get(base + "/todos", timeout=10).json()["data"]
        assert listed == [created.json()["data"]]
    finally:
        stop(second)
