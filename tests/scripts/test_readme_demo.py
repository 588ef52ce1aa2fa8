"""README's offline demo, as a newcomer runs it: README's one command (`./scripts/serve --demo`,
which sets up the venv and runs scripts/serve.py with its arguments), the lines it prints once
the service answers, then README's own demo requests; and what ./scripts/serve prints, in
process, with and without a model."""

import os
import re
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import requests

from scripts.serve import base_url, next_steps
from tests.support.processes import ROOT, free_port

README = (ROOT / "README.md").read_text()


def demo_blocks() -> list[list[list[str]]]:
    """The commands of the sh blocks of README's "Trying it offline", one list per block."""
    section = README[README.index("## Trying it offline") :]
    section = section[: section.index("\n## ", 1)]
    blocks = re.findall(r"```sh\n(.*?)```", section, re.S)
    return [[shlex.split(line) for line in b.replace("\\\n", " ").splitlines()] for b in blocks]


def curl_fields(command: list[str]) -> dict[str, str]:
    return dict(command[i + 1].split("=", 1) for i, word in enumerate(command) if word == "-d")


def wait_for_line(log: Path, start: str, process: subprocess.Popen, timeout: float) -> str:
    """The first line of the log that starts with `start`."""
    deadline = time.monotonic() + timeout
    while True:
        text = log.read_text(errors="replace")
        found = [line for line in text.splitlines() if line.startswith(start)]
        if found:
            return found[0]
        assert process.poll() is None, f"exited with {process.returncode}:\n{text}"
        assert time.monotonic() < deadline, text
        time.sleep(0.1)


def wait_for_model(url: str, states: set[str], timeout: float) -> dict:
    deadline = time.monotonic() + timeout
    while (status := requests.get(url + "/model/status", timeout=10).json())["state"] not in states:
        assert time.monotonic() < deadline, status
        time.sleep(0.1)
    return status


def test_readmes_demo_command_serves_the_tiny_model_offline_and_makes_an_image(tmp_path: Path):
    (serve,), (pull, generate) = demo_blocks()
    assert serve[0] == "./scripts/serve" and pull[-1].endswith("/model/pull")
    assert 'exec python scripts/serve.py "$@"' in (ROOT / "scripts" / "serve").read_text()
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    env = {
        **os.environ,
        "BIND": f"127.0.0.1:{port}",
        "DATA_DIR": str(tmp_path / "data"),
        "MONGODB_URI": "mongodb://127.0.0.1:9/unused",  # the image API never touches it
        "ACCESS_LOG": "0",
        "PRELOAD_MODEL_CODE": "0",
        # Nothing from outside: any request that is not to this machine fails.
        "HTTP_PROXY": "http://127.0.0.1:9",
        "HTTPS_PROXY": "http://127.0.0.1:9",
        "NO_PROXY": "127.0.0.1,localhost",
    }
    env.pop("FRONT_PROXY", None)  # its default: the proxy only beyond loopback
    log = tmp_path / "serve.log"
    with log.open("wb") as out:
        process = subprocess.Popen(
            [sys.executable, "scripts/serve.py", *serve[1:]],
            cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
    try:
        demo = wait_for_line(log, "serve: demo hub at ", process, 120)
        work = Path(demo.rsplit("its files in ", 1)[1])
        assert wait_for_line(log, "serve: the page: ", process, 60) == f"serve: the page: {url}/ui/"
        assert wait_for_line(log, "serve: the API docs: ", process, 1).endswith(f"{url}/api/docs")
        assert "press Pull" in wait_for_line(log, "serve: no model yet", process, 1)

        assert requests.post(url + "/model/pull", timeout=10).status_code == 202
        status = wait_for_model(url, {"ready", "failed"}, 60)
        assert status["state"] == "ready", status
        assert status["model_path"].startswith(str(work))  # the demo's own folder
        started = time.monotonic()
        response = requests.post(url + "/generate", data=curl_fields(generate), timeout=120)
        assert response.status_code == 200, response.text
        assert response.headers["X-Size"] == "64x64"
        # On loopback serve puts no proxy in front: gunicorn answers itself.
        assert response.headers["Server"] == "gunicorn"
        assert time.monotonic() - started < 60  # well inside GEN_SYNC_TIMEOUT
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
        process.wait(60)
    assert process.returncode == 0, log.read_text()
    assert not work.exists()  # the demo leaves nothing behind


def test_with_no_model_it_names_the_page_the_docs_and_the_pull():
    url = "http://127.0.0.1:8000"
    lines = next_steps(url, {"weights_on_share": False, "model_id": "org/model"}, demo=False)
    assert lines[:2] == [f"serve: the page: {url}/ui/", f"serve: the API docs: {url}/api/docs"]
    assert lines[2] == (
        "serve: no model yet: press Pull on the page, or POST /model/pull "
        f"(curl -X POST {url}/model/pull), to fetch org/model (the default is about 7 GB)"
    )


def test_with_the_model_on_the_share_there_is_no_next_step():
    url = "http://127.0.0.1:8000"
    lines = next_steps(url, {"weights_on_share": True, "model_id": "org/model"}, demo=False)
    assert lines == [f"serve: the page: {url}/ui/", f"serve: the API docs: {url}/api/docs"]


def test_the_printed_address_is_one_a_browser_here_opens():
    assert base_url("127.0.0.1:8000") == "http://127.0.0.1:8000"
    assert base_url("0.0.0.0:8000") == "http://127.0.0.1:8000"  # the container's BIND
    assert base_url("[::1]:9000") == "http://[::1]:9000"
    assert base_url("localhost") == "http://localhost:8000"  # gunicorn's own default port
    assert base_url("unix:/run/imagegen.sock") is None
