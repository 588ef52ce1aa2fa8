"""POST /upscale in process (served here, no gunicorn) on the tiny SD model, with UPSCALERS a
tiny random x4 ESRGAN (a Real-ESRGAN .pth) and a tiny x2 one on the test hub: the job, its
tiles as steps, cancel between tiles, the record, a stored image as the source, and the
refusals that queue nothing."""

import base64
import io
import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import requests
import webuiapi
from PIL import Image

from imagegen.generation.requests import GenerationRequest
from imagegen.generation.upscale import AUTO_TILE_MIN, Upscaling, tile_budget
from imagegen.generation.upscale_request import UpscaleRequest, network_pixels
from imagegen.model.memory import memory_limit
from imagegen.model.upscalers.tiles import bytes_per_pixel
from imagegen.model.upscalers.upscaler import load_model_upscaler
from imagegen.services import upscale_intake
from tests.support import sse
from tests.support.in_process import LoopbackApp, ready_here
from tests.support.jobs import cancel_all, wait_until
from tests.support.tiny_upscaler import ESRGAN_REPO, X4, place_on_hub

UPSCALERS = f"{ESRGAN_REPO}:tiny-x4.pth, {ESRGAN_REPO}:tiny-x2.safetensors=Double"
# Tiles of 32 input pixels (a 16-pixel margin each side) for the tiny x4 network.
TILE_BUDGET = bytes_per_pixel(X4) * 64 * 64
# A synchronous upscale estimated past 1.25 x this is refused at once (GEN_SYNC_REFUSE_FACTOR).
SYNC_TIMEOUT = 60


@pytest.fixture(scope="module")
def app(hub_root: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LoopbackApp]:
    place_on_hub(hub_root)
    work = tmp_path_factory.mktemp("upscale")
    env = {
        "UPSCALERS": UPSCALERS,
        "UPSCALE_TILE_MEMORY": str(TILE_BUDGET),
        "GEN_SYNC_TIMEOUT": str(SYNC_TIMEOUT),
    }
    with ready_here(hub_root, work, **env) as served:
        assert served.backend is not None
        served.backend.upscalers.wait(60)  # the pull that POST /model/pull started
        assert not served.backend.upscalers.missing()
        yield served


@pytest.fixture(autouse=True)
def idle_queue(app: LoopbackApp) -> Iterator[None]:
    yield
    cancel_all(app)


def png_of(size: tuple[int, int], seed: int = 0) -> bytes:
    pixels = np.random.default_rng(seed).integers(0, 256, (size[1], size[0], 3), dtype=np.uint8)
    buffer = io.BytesIO()
    Image.fromarray(pixels).save(buffer, format="PNG")
    return buffer.getvalue()


def upscale(app: LoopbackApp, image: bytes | None = None, **fields: str) -> requests.Response:
    files = None if image is None else {"image": ("in.png", image, "image/png")}
    return requests.post(app.url("/upscale"), data=fields, files=files, timeout=120)


def test_a_4x_network_asked_for_2x_runs_at_4x_in_tiles_and_is_resized_to_2x(app):
    source = png_of((100, 48))
    response = upscale(app, source, upscaler="tiny-x4", scale="2")
    assert response.status_code == 200, response.text
    result = Image.open(io.BytesIO(response.content))
    assert result.size == (200, 96)
    assert response.headers["X-Upscaler"] == "tiny-x4"
    assert response.headers["X-Scale"] == "2"
    # The same network on the share, run here: the service's tiles give its picture.
    share = Path(app.env["MODEL_DIR"])
    net = load_model_upscaler(share / "upscalers/testorg--tiny-esrgan/tiny-x4.pth")
    expected = net.upscale(Image.open(io.BytesIO(source)), scale=2, budget_bytes=TILE_BUDGET)
    assert np.array_equal(np.asarray(result.convert("RGB")), np.asarray(expected))

    record = requests.get(app.url(f"/images/{response.headers['X-Image-Id']}")).json()
    ran = record["parameters"]["upscale"]
    assert ran["upscaler"] == "tiny-x4" and ran["scale"] == 2 and ran["upscaler_scale"] == 4
    assert ran["tiles"] == 8  # 100x48 in 32-pixel tiles
    assert (ran["source_width"], ran["source_height"], ran["source_image"]) == (100, 48, None)
    assert (record["parameters"]["width"], record["parameters"]["height"]) == (200, 96)
    assert requests.get(app.url(ran["source_url"])).content == source
    assert set(record["timings"]) == {"queued_seconds", "upscale_seconds", "png_seconds"}
    info = result.text["parameters"]
    assert info == "Postprocess upscale by: 2, Postprocess upscaler: tiny-x4"


def test_async_job_counts_tiles_as_steps_and_a_cancel_stops_it_between_tiles(app):
    response = upscale(app, png_of((512, 512)), upscaler="tiny-x4", scale="4", **{"async": "true"})
    assert response.status_code == 202, response.text
    job_id = response.json()["id"]
    assert response.json()["parameters"]["upscale"]["upscaler"] == "tiny-x4"
    running = wait_until(app, job_id, lambda j: j["progress"]["step"] >= 2)
    assert running["progress"]["steps"] == 256  # 512x512 in 32-pixel tiles
    assert running["phase"] == "upscaling"
    requests.delete(app.url(f"/jobs/{job_id}"))
    ended = wait_until(app, job_id, lambda j: j["state"] != "running", timeout=30)
    assert ended["state"] == "cancelled"
    assert ended["progress"]["step"] < 256
    assert ended["image"] is None


def test_async_job_succeeds_with_its_record_and_steps(app):
    response = upscale(app, png_of((48, 32)), upscaler="Double", width="96", **{"async": "true"})
    assert response.status_code == 202, response.text
    done = wait_until(app, response.json()["id"], lambda j: j["state"] == "succeeded")
    assert done["progress"]["step"] == done["progress"]["steps"] >= 1
    record = done["image"]
    assert (record["parameters"]["width"], record["parameters"]["height"]) == (96, 64)
    assert record["parameters"]["upscale"]["upscaler_scale"] == 2


def test_a_stored_image_keeps_its_parameters_and_a_size_is_cut_from_the_centre(app):
    made = requests.post(
        app.url("/generate"), data={"prompt": "a lighthouse", "size": "64x64", "seed": "5"}
    )
    assert made.status_code == 200, made.text
    image_id = made.headers["X-Image-Id"]
    response = upscale(app, image_id=image_id, upscaler="Lanczos", width="160", height="96")
    assert response.status_code == 200, response.text
    result = Image.open(io.BytesIO(response.content))
    assert result.size == (160, 96)
    source = Image.open(io.BytesIO(requests.get(app.url(f"/images/{image_id}.png")).content))
    whole = source.convert("RGB").resize((160, 160), Image.Resampling.LANCZOS)
    assert np.array_equal(np.asarray(result), np.asarray(whole.crop((0, 32, 160, 128))))
    record = requests.get(app.url(f"/images/{response.headers['X-Image-Id']}")).json()
    parameters = record["parameters"]
    assert (parameters["prompt"], parameters["seed"]) == ("a lighthouse", 5)
    assert parameters["upscale"]["source_image"] == image_id
    assert parameters["upscale"]["scale"] == 2.5
    assert result.text["parameters"].endswith(
        ", Postprocess upscale by: 2.5, Postprocess upscaler: Lanczos"
    )
    assert result.text["parameters"].startswith("a lighthouse\n")


def test_json_body_takes_the_image_as_base64_and_defaults_to_the_first_upscalers_entry(app):
    body = {"image": base64.b64encode(png_of((20, 20))).decode(), "scale": 2}
    response = requests.post(app.url("/upscale"), json=body, timeout=120)
    assert response.status_code == 200, response.text
    assert response.headers["X-Upscaler"] == "tiny-x4"
    assert Image.open(io.BytesIO(response.content)).size == (40, 40)


def queued_and_stored(app: LoopbackApp) -> tuple[int, int]:
    inputs = Path(app.env["OUTPUT_DIR"]) / "inputs"
    stored = len(list(inputs.iterdir())) if inputs.is_dir() else 0
    return len(requests.get(app.url("/jobs"), params={"limit": 200}).json()), stored


@pytest.mark.parametrize(
    ("fields", "with_image", "field", "words"),
    [
        ({"upscaler": "Nope", "scale": "2"}, True, "upscaler", "'Nope' is not offered"),
        ({"scale": "1"}, True, "scale", "greater than 1"),
        ({"scale": "0.5"}, True, "scale", "greater than 1"),
        ({"scale": "2", "width": "64"}, True, "scale", upscale_intake.SCALE_AND_SIZE),
        ({}, True, "scale", upscale_intake.NO_SCALE),
        ({"scale": "128"}, True, "scale", "past GEN_MAX_SIDE (2048)"),
        ({"width": "16"}, True, "width", upscale_intake.NOT_LARGER),
        ({"scale": "2"}, False, "image", upscale_intake.NO_SOURCE),
        ({"scale": "4096"}, True, "scale", "less than or equal to 2048"),
        ({"scale": "2", "image_id": "20260101T000000000000Z-abcdef"}, True, "image_id", "not both"),
        ({"scale": "2", "prompt": "x"}, True, "prompt", "is not a field of /upscale"),
    ],
)
def test_bad_input_is_a_400_naming_the_field_and_queues_nothing(
    app, fields, with_image, field, words
):
    before = queued_and_stored(app)
    response = upscale(app, png_of((32, 32)) if with_image else None, **fields)
    assert response.status_code == 400, response.text
    detail = json.dumps(response.json())
    assert field in detail and words in detail, detail
    assert queued_and_stored(app) == before


def test_an_unknown_image_id_is_a_404(app):
    response = upscale(app, image_id="20260101T000000000000Z-abcdef", scale="2")
    assert response.status_code == 404, response.text


def test_the_estimate_is_the_documented_guess(app):
    """ESRGAN x4's counted work at 100 GFLOP/s: 36e6 x 512 x 512 / 1e11 = 94 s for a
    512x512 source at 4x (one pass), 4 x 36e6 x 64 x 64 / 1e11 = 5.9 s (two passes: 64
    then 256 pixels a side) for a 64x64 one at 8x; a filter 0.05 s an output megapixel."""
    jobs = app.backend.jobs
    cases = [
        ((512, 512), "tiny-x4", 4, 94.37),
        ((64, 64), "tiny-x4", 8, 25.17),
        ((1000, 1000), "Lanczos", 2, 0.2),
    ]
    for size, name, scale, seconds in cases:
        upscale = UpscaleRequest(
            source="0" * 64,
            upscaler=name,
            scale=scale,
            width=size[0] * scale,
            height=size[1] * scale,
            source_width=size[0],
            source_height=size[1],
            network_pixels=network_pixels(size, scale) if name != "Lanczos" else 0,
        )
        found = jobs.estimate(GenerationRequest(prompt="", upscale=upscale))
        assert found is not None and found.image_seconds == pytest.approx(seconds, rel=0.01)


def test_a_synchronous_upscale_past_the_timeout_is_refused_at_once_and_queues_nothing(app):
    before = queued_and_stored(app)
    started = time.monotonic()
    response = upscale(app, png_of((512, 512), seed=11), upscaler="tiny-x4", scale="4")
    assert response.status_code == 400, response.text
    assert "This upscale would take about 95 s here" in response.text
    assert "Send it asynchronously (async=true" in response.text
    assert time.monotonic() - started < 30
    assert queued_and_stored(app) == before
    small = upscale(app, png_of((16, 16)), upscaler="Nearest", scale="3")
    assert small.status_code == 200, small.text


def test_the_event_stream_counts_tiles_as_steps(app):
    response = upscale(app, png_of((100, 48)), upscaler="tiny-x4", scale="2", **{"async": "true"})
    assert response.status_code == 202, response.text
    job_id = response.json()["id"]
    with sse.open_stream(app.url(f"/jobs/{job_id}/events")) as stream:
        events = list(sse.read_events(stream))
    steps = [e.data["step"] for e in events if e.name == "step"]
    assert steps and steps[-1] == 8 and steps == sorted(steps)
    assert {e.data["steps"] for e in events if e.name == "step"} == {8}
    assert events[-1].name == "succeeded"


def test_a1111_progress_shows_this_clients_extras_tiles(app):
    net = app.backend.upscalers.find("tiny-x4").net
    hook = net.register_forward_pre_hook(lambda *_: time.sleep(0.2))
    source = Image.open(io.BytesIO(png_of((100, 48), seed=8)))
    done: list = []
    worker = threading.Thread(
        target=lambda: done.append(webui(app).extra_single_image(source, upscaler_1="tiny-x4")),
        daemon=True,
    )
    try:
        worker.start()
        deadline = time.monotonic() + 60
        while True:
            progress = requests.get(app.url("/sdapi/v1/progress")).json()
            if progress["state"]["sampling_step"] >= 1:
                break
            assert time.monotonic() < deadline, progress
            time.sleep(0.02)
        assert progress["state"]["sampling_steps"] == 8
        assert progress["textinfo"] == "upscaling"
        assert 0 < progress["progress"] < 1
        worker.join(60)
        assert done and done[0].images[0].size == (200, 96)
    finally:
        hook.remove()


# A1111's extras through webuiapi, unchanged, over a loopback port.


def webui(app: LoopbackApp) -> webuiapi.WebUIApi:
    return webuiapi.WebUIApi(baseurl=app.url("/sdapi/v1"))


def test_webuiapi_extra_single_image_runs_the_network_at_its_own_scale_then_resizes(app):
    source = Image.open(io.BytesIO(png_of((30, 20), seed=3)))
    result = webui(app).extra_single_image(source, upscaler_1="tiny-x4", upscaling_resize=3)
    [image] = result.images
    assert image.size == (90, 60)
    share = Path(app.env["MODEL_DIR"])
    net = load_model_upscaler(share / "upscalers/testorg--tiny-esrgan/tiny-x4.pth")
    expected = net.upscale(source, scale=3, budget_bytes=TILE_BUDGET)  # 4x, resized to 3x
    assert np.array_equal(np.asarray(image.convert("RGB")), np.asarray(expected))
    assert result.info == "<p>Postprocess upscale by: 3, Postprocess upscaler: tiny-x4</p>"


def test_webuiapi_defaults_upscale_2x_with_none_as_lanczos(app):
    source = Image.open(io.BytesIO(png_of((24, 24), seed=4))).convert("RGB")
    [image] = webui(app).extra_single_image(source).images  # upscaler_1 "None", 2x
    expected = source.resize((48, 48), Image.Resampling.LANCZOS)
    assert np.array_equal(np.asarray(image.convert("RGB")), np.asarray(expected))


def test_webuiapi_resize_to_a_size_crops_the_centre_or_keeps_the_covering_size(app):
    source = Image.open(io.BytesIO(png_of((40, 20), seed=5)))
    api = webui(app)
    cut = api.extra_single_image(
        source, resize_mode=1, upscaling_resize_w=60, upscaling_resize_h=60, upscaler_1="Nearest"
    ).images[0]
    assert cut.size == (60, 60)
    whole = api.extra_single_image(
        source, resize_mode=1, upscaling_resize_w=60, upscaling_resize_h=60,
        upscaler_1="Nearest", upscaling_crop=False,
    ).images[0]  # fmt: skip
    assert whole.size == (120, 60)
    assert np.array_equal(np.asarray(cut), np.asarray(whole)[:, 30:90])


def test_webuiapi_upscaler_2_is_blended_over_the_first_at_its_visibility(app):
    source = Image.open(io.BytesIO(png_of((16, 16), seed=6))).convert("RGB")
    result = webui(app).extra_single_image(
        source, upscaler_1="Nearest", upscaler_2="Lanczos", extras_upscaler_2_visibility=0.25
    )
    nearest = source.resize((32, 32), Image.Resampling.NEAREST)
    lanczos = source.resize((32, 32), Image.Resampling.LANCZOS)
    expected = Image.blend(nearest, lanczos, 0.25)
    assert np.array_equal(np.asarray(result.images[0].convert("RGB")), np.asarray(expected))
    assert "Postprocess upscaler 2: Lanczos" in result.info


def test_webuiapi_extra_batch_images_upscales_each_in_order(app):
    sources = [Image.open(io.BytesIO(png_of((8 + i, 8), seed=i))) for i in range(3)]
    result = webui(app).extra_batch_images(sources, upscaler_1="Double", upscaling_resize=2)
    assert [image.size for image in result.images] == [(16, 16), (18, 16), (20, 16)]
    assert "Postprocess upscaler: Double" in result.info


@pytest.mark.parametrize(
    ("fields", "field", "words"),
    [
        ({"upscaler_1": "Nope"}, "upscaler_1", "'Nope' is not offered"),
        ({"upscaling_resize": 1}, "upscaling_resize", "greater than 1"),
        ({"upscaling_resize": 64}, "upscaling_resize", "past GEN_MAX_SIDE"),
        ({"gfpgan_visibility": 0.5}, "gfpgan_visibility", "less than or equal to 0"),
        (
            {"upscaler_2": "Nope", "extras_upscaler_2_visibility": 0.5},
            "upscaler_2",
            "'Nope' is not offered",
        ),
    ],
)
def test_extras_bad_input_is_a_400_naming_a1111s_field_and_queues_nothing(
    app, fields, field, words
):
    before = queued_and_stored(app)
    body = {"image": base64.b64encode(png_of((40, 40))).decode(), **fields}
    response = requests.post(app.url("/sdapi/v1/extra-single-image"), json=body, timeout=60)
    assert response.status_code == 400, response.text
    detail = json.dumps(response.json())
    assert field in detail and words in detail, detail
    assert queued_and_stored(app) == before


def test_extra_batch_images_with_one_bad_image_queues_none_and_stores_none(app):
    before = queued_and_stored(app)
    good = base64.b64encode(png_of((8, 8), seed=9)).decode()
    body = {"imageList": [{"data": good, "name": "a"}, {"data": "bm90IGFuIGltYWdl", "name": "b"}]}
    response = requests.post(app.url("/sdapi/v1/extra-batch-images"), json=body, timeout=60)
    assert response.status_code == 400, response.text
    assert "imageList.1.data" in response.text
    assert queued_and_stored(app) == before


def test_tiles_get_the_configured_budget_or_a_tenth_of_the_models_in_memory(app):
    """The one rule an upscale job and a hires fix's upscaler size their tiles by."""
    upscaling = app.backend.jobs.upscaling
    assert upscaling.budget() == TILE_BUDGET  # UPSCALE_TILE_MEMORY
    resident = app.backend.shelf.resident_bytes()
    assert resident > 0  # the test's model, loaded and counted in fp32
    auto = Upscaling(upscaling.offered, 0, app.backend.shelf.resident_bytes)
    assert auto.budget() == max(AUTO_TILE_MIN, resident // 10)
    gib = 2**30
    assert tile_budget(12345, 14 * gib) == 12345
    assert tile_budget(0, 4 * gib) == 4 * gib // 10  # SD 1.5's fp32 weights: about 410 MiB
    assert tile_budget(0, 14 * gib) == 14 * gib // 10  # SDXL's
    assert tile_budget(0, 40 * gib) == 2 * gib
    assert tile_budget(0, gib) == 256 * 2**20
    limit = memory_limit()
    assert limit is not None  # the container's or the machine's
    assert tile_budget(0, 0) == min(2 * gib, limit // 8)  # nothing in memory


def test_a_retry_with_an_idempotency_key_joins_its_first_attempts_job(app):
    image = png_of((20, 20), seed=12)
    answers = [
        requests.post(
            app.url("/upscale"),
            data={"scale": "2", "async": "true", "upscaler": "Nearest"},
            files={"image": ("in.png", image, "image/png")},
            headers={"Idempotency-Key": "upscale-retry-1"},
            timeout=60,
        )
        for _ in range(2)
    ]
    assert [a.status_code for a in answers] == [202, 202], answers[0].text
    assert answers[0].json()["id"] == answers[1].json()["id"]
    sync = [
        requests.post(
            app.url("/upscale"),
            data={"scale": "2", "upscaler": "Nearest"},
            files={"image": ("in.png", image, "image/png")},
            headers={"Idempotency-Key": "upscale-retry-2"},
            timeout=60,
        )
        for _ in range(2)
    ]
    assert sync[0].headers["X-Image-Id"] == sync[1].headers["X-Image-Id"]


def test_deleting_an_upscaled_image_removes_its_stored_source(app):
    response = upscale(app, png_of((10, 10), seed=13), upscaler="Nearest", scale="2")
    assert response.status_code == 200, response.text
    image_id = response.headers["X-Image-Id"]
    record = requests.get(app.url(f"/images/{image_id}")).json()
    source_url = record["parameters"]["upscale"]["source_url"]
    assert requests.get(app.url(source_url)).status_code == 200
    assert requests.delete(app.url(f"/images/{image_id}")).status_code == 200
    assert requests.get(app.url(source_url)).status_code == 404  # nothing else names it
