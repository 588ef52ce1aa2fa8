"""docs/keys.md's commands, copied as written, against the service ./scripts/serve started: the
same database (its embedded one, on its own port) and the service's own API_KEYS where the
terminal they run in sets none; the secret alone on stdout, whether the service takes it on
stderr. With no service running, ./scripts/manage starts the embedded database for the command,
and the key is there for the next start (the start the docs' commands then run against)."""

import os
import re
import shlex
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import requests

from tests.support.processes import ROOT, free_port, wait_for_http

KEYS_DOC = (ROOT / "docs" / "keys.md").read_text()
SECRET = re.compile(r"igk_[0-9a-f]+_[\w-]+")


def doc_commands() -> list[list[str]]:
    """The commands of docs/keys.md's "Create, hand out, revoke" sh block, comments dropped."""
    section = KEYS_DOC[KEYS_DOC.index("## Create, hand out, revoke") :]
    (block,) = re.findall(r"```sh\n(.*?)```", section[: section.index("\n## ", 1)], re.S)
    return [shlex.split(line, comments=True) for line in block.splitlines()]


def terminal(tmp_path: Path, db_port: int) -> dict[str, str]:
    """A newcomer's terminal: no MONGODB_URI, no API_KEYS (the service's own are elsewhere)."""
    unset = ("MONGODB_URI", "API_KEYS", "API_TOKEN", "SECRET_KEY", "GEN_NICE")
    env = {k: v for k, v in os.environ.items() if k not in unset}
    return {**env, "DATA_DIR": str(tmp_path / "data"), "EMBEDDED_DB_PORT": str(db_port)}


@contextmanager
def serving(env: dict[str, str], port: int, log: Path) -> Iterator[str]:
    """./scripts/serve (scripts/serve.py, as the shell script runs it) with API_KEYS on."""
    service_env = {**env, "BIND": f"127.0.0.1:{port}", "API_KEYS": "1", "ACCESS_LOG": "0",
                   "PRELOAD_MODEL_CODE": "0"}  # fmt: skip
    with log.open("ab") as out:
        process = subprocess.Popen(
            [sys.executable, "scripts/serve.py"],
            cwd=ROOT, env=service_env, stdout=out, stderr=subprocess.STDOUT,
            start_new_session=True,
        )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    try:
        wait_for_http(url + "/health", 90, process)
        yield url
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(60)


def run(command: list[str], env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=180)


def status_with(url: str, secret: str, path: str = "/jobs") -> int:
    headers = {"Authorization": f"Bearer {secret}"}
    return requests.get(url + path, headers=headers, timeout=10).status_code


def test_the_docs_key_commands_work_as_written_against_the_service_serve_started(tmp_path: Path):
    commands = doc_commands()
    assert [c[:3] for c in commands] == [["./scripts/manage", "keys", c[2]] for c in commands]
    env = terminal(tmp_path, free_port())
    # No service yet: the embedded database on DATA_DIR for the command alone; this terminal
    # has no API_KEYS, so the key is made with a warning, not a failure.
    done = run(["./scripts/manage", "keys", "create", "bob"], env)
    assert done.returncode == 0, done.stderr
    bob = done.stdout.strip()
    assert SECRET.fullmatch(bob), done.stdout
    assert "no ./scripts/serve runs on" in done.stderr
    assert "warning: API_KEYS is off, so the service does not take named keys yet" in done.stderr
    secrets: dict[str, str] = {}
    with serving(env, free_port(), tmp_path / "serve.log") as url:
        assert status_with(url, bob) == 200  # the key made before is there for the start
        for command in commands:
            done = run(command, env)
            assert done.returncode == 0, (command, done.stderr)
            action, name = command[2], command[3] if len(command) > 3 else None
            if action in ("create", "rotate"):
                assert SECRET.fullmatch(done.stdout.strip()), done.stdout  # alone on stdout
                assert "API_KEYS is on: the service takes it" in done.stderr or action == "rotate"
                assert "with the service ./scripts/serve runs" in done.stderr
                old, secrets[name] = secrets.get(name), done.stdout.strip()
                if "--scope" in command:  # a scraper's key: /metrics and nothing else
                    assert command[command.index("--scope") + 1] == "metrics"
                    assert status_with(url, secrets[name], "/metrics") == 200
                    assert status_with(url, secrets[name]) == 403
                    continue
                assert status_with(url, secrets[name]) == 200
                if old is not None:
                    assert status_with(url, old) == 401  # rotated: the old one stops
            elif action == "list":
                names = [line.split("\t")[0] for line in done.stdout.splitlines()[1:]]
                assert sorted(names) == ["alice", "bob", "open-webui", "ops", "prometheus"]
            elif action == "revoke":
                assert status_with(url, secrets[name]) == 401
        assert status_with(url, secrets["open-webui"]) == 200
