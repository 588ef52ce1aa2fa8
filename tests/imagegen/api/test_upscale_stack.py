"""POST /upscale and A1111's extras in distributed mode on the session's shared stack: a web
replica (gunicorn) queues the job in Redis and the stack's Celery worker runs it. Its worker
offers the filters only (no UPSCALERS), so Lanczos and Nearest run here; a network's tiles in
distributed mode are held by tests/imagegen/generation/test_upscale_distributed.py. The
replica is this module's one process start: the job must cross Redis to a real Celery
worker and back."""

import io
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import requests
import webuiapi
from PIL import Image

from tests.support.model_service import ready_in_mode
from tests.support.processes import AppServer


@pytest.fixture(scope="module")
def app(
    request: pytest.FixtureRequest, hub_root: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[AppServer]:
    work = tmp_path_factory.mktemp("upscale-stack")
    with ready_in_mode(request, "distributed", hub_root, work) as server:
        yield server


def picture(size: tuple[int, int], seed: int = 0) -> Image.Image:
    rng = np.random.default_rng(seed)
    return Image.fromarray(rng.integers(0, 256, (size[1], size[0], 3), dtype=np.uint8))


def png(image: Image.Image) -> bytes:
    buffer = io.BytesIO()
    image.save(buffer, format="PNG")
    return buffer.getvalue()


def test_distributed_a_synchronous_upscale_is_run_by_the_celery_worker(app):
    source = picture((30, 20))
    response = requests.post(
        app.url("/upscale"), data={"scale": "2"},
        files={"image": ("in.png", png(source), "image/png")}, timeout=120,
    )  # fmt: skip
    assert response.status_code == 200, response.text
    assert response.headers["X-Upscaler"] == "Lanczos"  # no UPSCALERS: the default
    result = Image.open(io.BytesIO(response.content))
    expected = source.resize((60, 40), Image.Resampling.LANCZOS)
    assert np.array_equal(np.asarray(result), np.asarray(expected))
    job = requests.get(app.url(f"/jobs/{response.headers['X-Job-Id']}")).json()
    assert job["state"] == "succeeded" and job["parameters"]["upscale"]["upscaler"] == "Lanczos"


def test_distributed_an_async_upscale_is_a_job_with_its_record(app):
    response = requests.post(
        app.url("/upscale"), data={"upscaler": "nearest", "width": "45", "async": "true"},
        files={"image": ("in.png", png(picture((15, 10), seed=1)), "image/png")}, timeout=60,
    )  # fmt: skip
    assert response.status_code == 202, response.text
    deadline = time.monotonic() + 120
    while (job := requests.get(app.url(response.headers["Location"])).json())["state"] in (
        "queued", "running",
    ):  # fmt: skip
        assert time.monotonic() < deadline, job
        time.sleep(0.05)
    assert job["state"] == "succeeded", job
    assert job["progress"]["step"] == job["progress"]["steps"] == 1  # a filter: one step
    parameters = job["image"]["parameters"]
    assert (parameters["width"], parameters["height"]) == (45, 30)
    assert parameters["upscale"]["upscaler"] == "Nearest"
    assert parameters["upscale"]["upscaler_scale"] is None


def test_distributed_webuiapi_extra_single_image_through_the_replica(app):
    source = picture((12, 12), seed=2)
    api = webuiapi.WebUIApi(baseurl=app.url("/sdapi/v1"))
    [image] = api.extra_single_image(source, upscaler_1="Nearest", upscaling_resize=3).images
    expected = source.resize((36, 36), Image.Resampling.NEAREST)
    assert np.array_equal(np.asarray(image.convert("RGB")), np.asarray(expected))
