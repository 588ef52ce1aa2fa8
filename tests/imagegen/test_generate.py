"""POST /generate on a ready tiny pipeline: bounds, reproducibility, headers, queueing, /health."""

import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests

from tests.support.model_service import ready_app
from tests.support.processes import AppServer


@pytest.fixture(scope="module")
def app(hub_root: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[AppServer]:
    with ready_app(hub_root, tmp_path_factory.mktemp("generate"), GEN_QUEUE_MAX="1") as server:
        yield server


def generate(app: AppServer, **fields: str) -> requests.Response:
    return requests.post(app.url("/generate"), data=fields, timeout=120)


def test_png_and_its_parameters_in_headers(app):
    response = generate(
        app, prompt="a lighthouse", steps="3", guidance="5.5", size="72x64", seed="7"
    )
    assert response.status_code == 200, response.text
    assert response.headers["Content-Type"] == "image/png"
    assert response.content.startswith(b"\x89PNG\r\n\x1a\n")
    width, height = int.from_bytes(response.content[16:20]), int.from_bytes(response.content[20:24])
    assert (width, height) == (72, 64)
    assert response.headers["X-Seed"] == "7"
    assert response.headers["X-Steps"] == "3"
    assert response.headers["X-Guidance"] == "5.5"
    assert response.headers["X-Size"] == "72x64"
    assert response.headers["X-Device"] == "cpu"
    assert float(response.headers["X-Generation-Seconds"]) > 0


def test_defaults_native_size_and_a_reported_random_seed(app):
    first = generate(app, prompt="a cat")
    assert first.status_code == 200
    assert first.headers["X-Size"] == "64x64"  # the tiny model's sample_size x VAE scale
    assert first.headers["X-Steps"] == "2"  # GEN_DEFAULT_STEPS
    again = generate(app, prompt="a cat", seed=first.headers["X-Seed"])
    assert again.content == first.content


def test_same_seed_same_bytes_other_seed_other_image(app):
    one = generate(app, prompt="mountains", seed="1234", size="64x64")
    two = generate(app, prompt="mountains", seed="1234", size="64x64", force_cpu="true")
    other = generate(app, prompt="mountains", seed="1235", size="64x64")
    assert one.content == two.content  # force_cpu changes nothing on a CPU host
    assert other.content != one.content


def test_multipart_form_is_accepted_like_urlencoded(app):
    urlencoded = generate(app, prompt="snow", seed="3")
    multipart = requests.post(
        app.url("/generate"), files={"prompt": (None, "snow"), "seed": (None, "3")}, timeout=120
    )
    assert multipart.status_code == 200
    assert multipart.content == urlencoded.content


@pytest.mark.parametrize(
    ("fields", "field", "rule"),
    [
        ({}, "prompt", "required"),
        ({"prompt": ""}, "prompt", "at least 1"),
        ({"prompt": "   "}, "prompt", "non-space"),
        ({"prompt": "p" * 1001}, "prompt", "at most 1000"),
        ({"negative_prompt": "n" * 1001}, "negative_prompt", "at most 1000"),
        ({"steps": "0"}, "steps", "greater than or equal to 1"),
        ({"steps": "101"}, "steps", "less than or equal to 100"),
        ({"steps": "2.5"}, "steps", "valid integer"),
        ({"guidance": "-0.1"}, "guidance", "greater than or equal to 0"),
        ({"guidance": "30.5"}, "guidance", "less than or equal to 30"),
        ({"guidance": "nan"}, "guidance", "finite number"),
        ({"guidance": "inf"}, "guidance", "finite number"),
        ({"guidance": "lots"}, "guidance", "valid number"),
        ({"size": "64"}, "size", "WIDTHxHEIGHT"),
        ({"size": "60x64"}, "size", "multiples of 8"),
        ({"size": "56x64"}, "size", "between 64 and 2048"),
        ({"size": "64x4096"}, "size", "between 64 and 2048"),
        ({"seed": "-1"}, "seed", "greater than or equal to 0"),
        ({"seed": str(2**32)}, "seed", "less than or equal to 4294967295"),
        ({"force_cpu": "maybe"}, "force_cpu", "valid boolean"),
        ({"stpes": "3"}, "stpes", "not a field"),
    ],
)
def test_each_bad_field_is_a_400_naming_field_and_rule(app, fields, field, rule):
    data = {"prompt": "fine", **fields} if "prompt" not in fields and fields != {} else fields
    started = time.monotonic()
    response = generate(app, **data)
    assert response.status_code == 400, response.text
    details = {d["field"]: d["message"] for d in response.json()["error"]["details"]}
    assert rule in details[field]
    assert field in response.json()["error"]["message"]
    assert time.monotonic() - started < 2  # refused before any generation


def test_health_answers_fast_during_a_generation(app):
    worker = threading.Thread(
        target=generate, args=(app,), kwargs={"prompt": "busy", "steps": "25", "size": "128x128"}
    )
    worker.start()
    latencies = []
    while worker.is_alive():
        started = time.monotonic()
        assert requests.get(app.url("/health"), timeout=5).status_code == 200
        latencies.append(time.monotonic() - started)
        time.sleep(0.05)
    assert len(latencies) >= 5
    assert max(latencies) < 1.0


def test_health_answers_fast_during_download_and_load(start_app, hub):
    hub.throttle_bytes_per_sec = 2_000_000
    app = start_app()
    requests.post(app.url("/model/pull"))
    latencies, states = [], set()
    while True:
        started = time.monotonic()
        health = requests.get(app.url("/health"), timeout=5)
        latencies.append(time.monotonic() - started)
        assert health.json() == {
            "status": "healthy",
            "device": "cpu",
            "version": health.headers["X-App-Version"],
        }
        state = requests.get(app.url("/model/status")).json()["state"]
        states.add(state)
        if state in ("ready", "failed"):
            break
        time.sleep(0.02)
    assert {"downloading", "loading", "ready"} <= states
    assert max(latencies) < 1.0
