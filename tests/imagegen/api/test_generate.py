"""POST /generate on a ready tiny pipeline: bounds, reproducibility, headers, queueing, /health,
and a synchronous request refused at once when its estimate is past the limit."""

import io
import math
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests
from PIL import Image

from imagegen.generation.schedulers import A1111_NAMES, NAMES
from tests.support.in_process import Served, ready_in_either_mode, served_here
from tests.support.model_service import MODES, model_service_env

# GEN_SYNC_TIMEOUT here: lowered so that a request is refused past an estimate of 125 s,
# still far above what the other requests of the module take on a busy machine.
SYNC_TIMEOUT = 100


@pytest.fixture(scope="module", params=MODES)
def app(
    request: pytest.FixtureRequest, hub_root: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Served]:
    """Every test here runs in both modes: in process (served from this process, no gunicorn),
    and distributed (a web replica of these settings on the session's shared Redis and
    worker)."""
    work = tmp_path_factory.mktemp(f"generate-{request.param}")
    env = {"GEN_QUEUE_MAX": "1", "GEN_SYNC_TIMEOUT": str(SYNC_TIMEOUT)}
    with ready_in_either_mode(request, request.param, hub_root, work, **env) as server:
        yield server


def generate(app: Served, **fields: str) -> requests.Response:
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
    assert response.headers["X-Scheduler"] == "PLMS"  # none chosen: the model's own (PNDM)
    assert "X-Adjusted" not in response.headers  # no preset, no cap: nothing changed
    assert response.headers["X-Size"] == "72x64"
    assert response.headers["X-Device"] == "cpu"
    assert float(response.headers["X-Generation-Seconds"]) > 0


def test_a_chosen_scheduler_runs_and_is_reported_in_headers_record_and_png(app):
    fields = {"prompt": "a lighthouse", "steps": "3", "seed": "7"}
    own = generate(app, **fields)
    response = generate(app, **fields, scheduler="euler_trailing")
    assert response.status_code == 200, response.text
    assert response.headers["X-Scheduler"] == "Euler SGM Uniform"  # A1111's name
    assert response.headers["X-Steps"] == "3"
    record = requests.get(app.url(f"/images/{response.headers['X-Image-Id']}")).json()
    assert record["parameters"]["scheduler"] == "Euler SGM Uniform"
    job = requests.get(app.url(f"/jobs/{response.headers['X-Job-Id']}")).json()
    assert (
        job["parameters"]["scheduler"] == "Euler SGM Uniform"
        and job["parameters"]["adjusted"] == []
    )
    text = Image.open(io.BytesIO(response.content)).text["parameters"]
    assert "Steps: 3, Sampler: Euler, Schedule type: SGM Uniform, CFG scale: 7," in text
    other = generate(app, **fields, scheduler="dpmpp_2m_karras")
    assert other.headers["X-Scheduler"] == "DPM++ 2M Karras"
    assert len({own.content, response.content, other.content}) == 3  # each its own image
    # Each job builds its scheduler afresh and the model's own one is put back after it.
    assert generate(app, **fields, scheduler="euler_trailing").content == response.content
    assert generate(app, **fields).content == own.content


def test_an_unknown_scheduler_over_http_is_a_400_listing_the_valid_names(app):
    response = generate(app, prompt="fine", scheduler="Euler ancestral")
    assert response.status_code == 400
    message = response.json()["error"]["message"]
    assert message == (
        f"Invalid request: scheduler: unknown scheduler 'Euler ancestral'; valid: "
        f"{', '.join(NAMES)}, or A1111's name for one: {', '.join(A1111_NAMES)}"
    )


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


def test_a_refused_field_over_http_is_a_400_in_the_image_error_shape(app):
    """Every rule is checked in-process (test_generate_form.py); this one goes over HTTP
    through the middleware, as a client sees it."""
    response = generate(app, prompt="fine", steps="0")
    assert response.status_code == 400
    assert response.json() == {
        "error": {
            "message": "Invalid request: steps: Input should be greater than or equal to 1",
            "details": [
                {"field": "steps", "message": "Input should be greater than or equal to 1"}
            ],
        }
    }


def test_health_answers_fast_during_a_generation(app):
    worker = threading.Thread(
        target=generate, args=(app,), kwargs={"prompt": "busy", "steps": "12", "size": "128x128"}
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


def test_a_synchronous_request_past_the_limit_is_refused_at_once_naming_its_estimate(app):
    """From the measurements of this app's own images (in distributed mode the worker's,
    through Redis): 1,024 times the pixels of a 64x64 image in 100 steps is far past 125 s."""
    assert generate(app, prompt="measured", size="64x64", steps="2").status_code == 200
    fields = {"steps": "100", "size": "2048x2048"}
    found = requests.get(app.url("/generate/estimate"), params=fields, timeout=30).json()
    assert found["refused"] is True and found["seconds"] > SYNC_TIMEOUT * 1.25
    assert found["limit_seconds"] == SYNC_TIMEOUT * 1.25

    started = time.monotonic()
    refused = generate(app, prompt="refused at once", **fields)
    assert time.monotonic() - started < 5  # not the 100 s a 504 would have taken
    assert refused.status_code == 400
    assert refused.json() == {"error": {"message": found["message"]}}
    message = found["message"]
    assert message.startswith(f"This request would take about {math.ceil(found['seconds'])} s")
    assert "100 steps at 2048x2048" in message and "async=true" in message
    assert "fewer steps" in message and "smaller size" in message
    listed = requests.get(app.url("/jobs"), params={"limit": 200}, timeout=30).json()
    assert not [job for job in listed if job["parameters"]["prompt"] == "refused at once"]
    assert generate(app, prompt="still taken", size="64x64", steps="2").status_code == 200


def test_health_answers_fast_during_download_and_load(hub, share, tmp_path):
    """The pull runs beside the request threads (served from this process: the threads are
    the app's, as gunicorn's are), so /health never waits for the download or the load."""
    hub.throttle_bytes_per_sec = 2_000_000
    with served_here(**model_service_env(hub.url, share, tmp_path)) as app:
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
