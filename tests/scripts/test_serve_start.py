"""What ./scripts/serve says and does at start: a taken address stops it before anything starts,
naming BIND, and the addresses it prints are its own process's; on loopback (a person's own
machine) generations run at the normal priority, beyond it below the requests, and an
operator's GEN_NICE wins, each said in a start line."""

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from scripts.serve import AddressTaken, claim_address, generation_priority, on_loopback
from tests.support.processes import ROOT, free_port, wait_for_http


def serve_env(tmp_path: Path, port: int, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("GEN_NICE", "SECRET_KEY")}
    return {
        **env,
        "BIND": f"127.0.0.1:{port}",
        "DATA_DIR": str(tmp_path / "data"),
        "MONGODB_URI": "mongodb://127.0.0.1:9/unused",  # no embedded database: not what's tested
        "ACCESS_LOG": "0",
        "PRELOAD_MODEL_CODE": "0",
        **extra,
    }


def start(env: dict[str, str], log: Path, *args: str) -> subprocess.Popen:
    with log.open("wb") as out:
        return subprocess.Popen(
            [sys.executable, "scripts/serve.py", *args],
            cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip


def wait_for_text(log: Path, text: str, process: subprocess.Popen, timeout: float = 60) -> str:
    deadline = time.monotonic() + timeout
    while text not in (content := log.read_text(errors="replace")):
        assert process.poll() is None, f"exited with {process.returncode}:\n{content}"
        assert time.monotonic() < deadline, content
        time.sleep(0.1)
    return content


def gunicorn_pid(serve: subprocess.Popen) -> str:
    """The gunicorn master ./scripts/serve started."""
    (child,) = Path(f"/proc/{serve.pid}/task/{serve.pid}/children").read_text().split()
    return child


def gunicorn_environ(serve: subprocess.Popen) -> dict[str, str]:
    """The environment of the gunicorn master ./scripts/serve started."""
    raw = Path(f"/proc/{gunicorn_pid(serve)}/environ").read_bytes().split(b"\0")
    return dict(item.decode().split("=", 1) for item in raw if b"=" in item)


def test_a_second_serve_on_a_taken_port_stops_at_once_naming_bind(tmp_path: Path):
    """The case seen: another server on the port answered the check, the page's address was
    printed, then gunicorn gave up. Here the other server is a first ./scripts/serve."""
    port = free_port()
    first_log = tmp_path / "first.log"
    first = start(serve_env(tmp_path, port), first_log)
    try:
        started = wait_for_text(first_log, "serve: the page: ", first)
        # A person's machine: the normal priority, said in a start line, and given to gunicorn.
        assert "serve: generation priority: GEN_NICE=0, the machine's normal one" in started
        assert gunicorn_environ(first)["GEN_NICE"] == "0"
        # What serve writes under DATA_DIR is its user's alone (config/file_modes.py).
        data = tmp_path / "data"
        assert data.stat().st_mode & 0o777 == 0o700
        assert (data / "secret_key").stat().st_mode & 0o777 == 0o600
        # gunicorn serves on the socket serve bound, not one it bound again after a check.
        assert b"fd://" in Path(f"/proc/{gunicorn_pid(first)}/cmdline").read_bytes()

        second_log = tmp_path / "second.log"
        # Its own embedded database would start, were the address checked after it.
        second_env = serve_env(tmp_path / "second", port, EMBEDDED_DB_PORT=str(free_port()))
        del second_env["MONGODB_URI"]
        second = start(second_env, second_log)
        assert second.wait(60) == 1
        said = second_log.read_text()
        assert f"serve: 127.0.0.1:{port} is taken by another process; set BIND" in said
        assert f"BIND=127.0.0.1:{port + 1} ./scripts/serve" in said
        assert "the page" not in said and "embedded database" not in said
        assert not (tmp_path / "second" / "data" / "mongo").exists()
        wait_for_http(f"http://127.0.0.1:{port}/health", 10, first)  # the first one still serves
    finally:
        first.send_signal(signal.SIGTERM)
        first.wait(60)
    assert first.returncode == 0, first_log.read_text()


def test_a_host_name_is_bound_on_its_ipv4_address_as_gunicorn_binds_it():
    """localhost is 127.0.0.1 whatever order /etc/hosts lists ::1 in (gunicorn takes IPv6
    only for a literal), so another server on 127.0.0.1 is found and browsers reach it."""
    port = free_port()
    listener = claim_address(f"localhost:{port}")
    assert listener is not None
    try:
        assert listener.family == socket.AF_INET
        assert listener.getsockname() == ("127.0.0.1", port)
        with pytest.raises(AddressTaken):
            claim_address(f"127.0.0.1:{port}")
    finally:
        listener.close()


def test_help_names_bind():
    done = subprocess.run(
        [sys.executable, "scripts/serve.py", "--help"],
        cwd=ROOT, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 0
    assert "BIND picks the address" in " ".join(done.stdout.split())


@pytest.mark.parametrize(
    ("bind", "local"),
    [
        ("127.0.0.1:8000", True),
        ("localhost:8000", True),
        ("[::1]:8000", True),
        ("127.0.0.2", True),
        ("0.0.0.0:8000", False),
        ("[::]:8000", False),
        ("192.168.1.20:8000", False),
        ("myhost.example:8000", False),
        ("unix:/run/imagegen.sock", False),
    ],
)
def test_loopback_is_this_machine_alone(bind: str, local: bool):
    assert on_loopback(bind) is local


def test_the_priority_is_normal_on_loopback_request_first_beyond_and_the_operators_when_set():
    nice, line = generation_priority({}, "127.0.0.1:8000")
    assert nice == "0" and "GEN_NICE=0" in line and "BIND is on loopback" in line
    nice, line = generation_priority({}, "0.0.0.0:8000")
    assert nice is None  # the service's own default, request first
    assert "GEN_NICE=10" in line and "BIND is beyond loopback" in line
    assert generation_priority({"GEN_NICE": "5"}, "127.0.0.1:8000") == (
        "5",
        "serve: generation priority: GEN_NICE=5, as set",
    )
    assert generation_priority({"GEN_NICE": "0"}, "0.0.0.0:8000")[0] == "0"
