"""README's offline demo, as a newcomer runs it: scripts/demo_hub.py, the service started with
the variables it prints, then README's own demo requests."""

import re
import shlex
import subprocess
import sys
import time
from pathlib import Path

import requests

from tests.support.model_service import wait_for_state
from tests.support.processes import ROOT, AppServer

README = (ROOT / "README.md").read_text()


def demo_requests() -> list[list[str]]:
    """The curl commands of README's demo block (the one after 'Trying it offline')."""
    section = README[README.index("Trying it offline: ") :]
    block = section[section.index("```sh") + 5 : section.index("```", section.index("```sh") + 5)]
    return [shlex.split(line) for line in block.replace("\\\n", " ").strip().splitlines()]


def curl_fields(command: list[str]) -> dict[str, str]:
    return dict(command[i + 1].split("=", 1) for i, word in enumerate(command) if word == "-d")


def test_the_demo_hub_and_readmes_demo_requests_make_an_image(tmp_path: Path):
    hub = subprocess.Popen(
        [sys.executable, "scripts/demo_hub.py"], cwd=ROOT, stdout=subprocess.PIPE, text=True
    )
    try:
        printed = ""
        deadline = time.monotonic() + 120
        while "./scripts/serve" not in printed:
            assert time.monotonic() < deadline, printed
            printed += hub.stdout.readline()
        words = shlex.split(re.search(r"(HF_ENDPOINT=\S+ MODEL_ID=\S+)", printed).group(1))
        env = dict(word.split("=", 1) for word in words)
        app = AppServer(
            {**env, "DATA_DIR": str(tmp_path), "MONGODB_URI": "mongodb://127.0.0.1:9/unused"},
            tmp_path / "app.log",
        )
        with app:
            pull, generate = demo_requests()
            assert pull[-1].endswith("/model/pull")
            assert requests.post(app.url("/model/pull"), timeout=10).status_code == 202
            assert wait_for_state(app, {"ready", "failed"})["state"] == "ready"
            started = time.monotonic()
            response = requests.post(app.url("/generate"), data=curl_fields(generate), timeout=120)
            assert response.status_code == 200, response.text
            assert response.headers["X-Size"] == "64x64"
            assert time.monotonic() - started < 60  # well inside GEN_SYNC_TIMEOUT
    finally:
        hub.terminate()
        hub.wait()
