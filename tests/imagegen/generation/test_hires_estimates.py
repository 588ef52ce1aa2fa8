"""GET /generate/estimate resolves a request as POST /generate does, and a hires fix's network
is the offered upscalers' one, in process (ready_here) on the tiny SD model with UPSCALERS a
tiny random x4 ESRGAN and a few-step LoRA dropped in by its published name:

- a hires fix's estimate counts both passes, and a network's own time as its upscale job's
  estimate; a few-step LoRA's recipe (a prompt tag or a `lora` field) its steps. Each is the
  estimate the submitted job is counted at (estimates.image_cost on the job's parameters, what
  the queue counts for it), with its steps and size; bad hires or LoRA input is /generate's 400.
  The web process resolves and estimates in both job modes; the boards differ only in where
  the measurements and workers come from (tests/imagegen/api/test_generate.py).
- hires and POST /upscale load the network once, and the hires fix's tiles follow
  UPSCALE_TILE_MEMORY, held on the job runner both modes run (imagegen.generation.execution).

A module of its own: UPSCALERS and UPSCALE_TILE_MEMORY differ from the other apps'."""

import io
import math
import shutil
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests
from django.test import override_settings
from PIL import Image

from imagegen.backend import upscaling_of
from imagegen.generation.estimates import image_cost
from imagegen.generation.execution import run_job
from imagegen.generation.hires import Hires
from imagegen.generation.images import ImageStore
from imagegen.generation.job_board import JobState
from imagegen.generation.parameters import with_defaults
from imagegen.generation.previews import Preview
from imagegen.generation.requests import GenerationRequest
from imagegen.generation.upscale import Upscaling
from imagegen.generation.upscale_request import UpscaleRequest
from imagegen.model.upscalers import upscaler as upscaler_module
from imagegen.model.upscalers.tiles import plan_tiles, tile_side
from tests.support.distributed import RedisServer
from tests.support.in_process import LoopbackApp, ready_here
from tests.support.model_service import SD_REPO, SDXL_REPO
from tests.support.solo_worker import solo_worker
from tests.support.tiny_adapters import KOHYA_FILE, LORA_REPO, build_tiny_loras
from tests.support.tiny_upscaler import ESRGAN_REPO, X4, place_on_hub

NETWORK = "tiny-x4"
NETWORK_PATH = f"upscalers/{ESRGAN_REPO.replace('/', '--')}/{NETWORK}.pth"
RECIPE = "Hyper-SD15-8steps-lora"  # Hyper-SD's 8-step recipe, by its published name
TILE_MEMORY = 12 * 2**20  # the tiny x4 network's 96x96 input in 3x3 tiles
FIRST = {"prompt": "a hires estimate", "size": "64x64", "steps": "2"}


@pytest.fixture(scope="module")
def app(hub_root: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LoopbackApp]:
    place_on_hub(hub_root)
    build_tiny_loras(hub_root, sd_repo=SD_REPO, sdxl_repo=SDXL_REPO)
    work = tmp_path_factory.mktemp("hires-estimates")
    with ready_here(
        hub_root, work, UPSCALERS=f"{ESRGAN_REPO}:{NETWORK}.pth", GEN_MAX_SIDE="512",
        UPSCALE_TILE_MEMORY=str(TILE_MEMORY),
    ) as served:  # fmt: skip
        served.backend.upscalers.pull()
        loras = Path(served.env["MODEL_DIR"]) / "loras"
        loras.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(hub_root / LORA_REPO / KOHYA_FILE, loras / f"{RECIPE}.safetensors")
        requests.post(served.url("/sdapi/v1/refresh-loras"), timeout=30).raise_for_status()
        yield served


def estimate(app: LoopbackApp, **fields: str) -> dict:
    answer = requests.get(app.url("/generate/estimate"), params=fields, timeout=30)
    assert answer.status_code == 200, answer.text
    return answer.json()


def made_job(app: LoopbackApp, **fields: str) -> Any:
    """The job of a synchronous POST /generate of `fields`, as the board holds it."""
    made = requests.post(app.url("/generate"), data=fields, timeout=300)
    assert made.status_code == 200, made.text
    job = app.backend.jobs.lookup(made.headers["X-Job-Id"])
    assert job is not None and job.state is JobState.SUCCEEDED
    return job


def tenths(seconds: float) -> float:
    """As GET /generate/estimate answers its figures: rounded up to tenths."""
    return math.ceil(seconds * 10) / 10


def counted_at(app: LoopbackApp, job: Any) -> float:
    """What the queue counts a job at (estimates.Ahead: image_cost of its parameters)."""
    cost = image_cost(app.backend.jobs.timings.measurements(), job.parameters)
    assert cost is not None
    return tenths(cost.seconds)


def test_a_hires_estimate_counts_both_passes_as_its_job_does(app):
    plain = estimate(app, **FIRST)
    asked = {**FIRST, "hires": "true", "hires_steps": "3"}
    hires = estimate(app, **asked)
    assert (hires["size"], hires["steps"]) == ("128x128", 2 + 3)
    assert hires["image_seconds"] >= plain["image_seconds"]
    # Where the tiny model's figures show in tenths: a first pass of 256x256.
    larger = estimate(app, **{**asked, "size": "256x256"})["image_seconds"]
    assert larger > estimate(app, **{**FIRST, "size": "256x256"})["image_seconds"]
    job = made_job(app, **asked)
    assert job.progress.steps == hires["steps"]
    assert job.parameters.hires.size == (128, 128)
    # The estimate now (a hires job measures no size) is what the queue counts the job at.
    assert estimate(app, **asked)["image_seconds"] == counted_at(app, job) == hires["image_seconds"]


@pytest.mark.parametrize(
    "fields", [{"prompt": f"a lamp <lora:{RECIPE}>"}, {"prompt": "a lamp", "lora": RECIPE}]
)
def test_a_few_step_loras_recipe_sets_the_estimates_steps_as_its_jobs(app, fields):
    plain = estimate(app, prompt="a lamp", size="64x64")
    asked = {**fields, "size": "64x64"}
    recipe = estimate(app, **asked)
    assert (plain["steps"], recipe["steps"]) == (2, 8)  # GEN_DEFAULT_STEPS, the recipe's
    large = {"size": "512x512"}  # where the tiny model's figures show in tenths
    assert (
        estimate(app, **fields, **large)["image_seconds"]
        > estimate(app, prompt="a lamp", **large)["image_seconds"]
    )
    job = made_job(app, **asked)
    assert (job.progress.steps, job.parameters.preset) == (8, "hyper-sd-8step")
    # After it ran (its image is measured): the estimate and the job's count still agree.
    assert estimate(app, **asked)["image_seconds"] == counted_at(app, job)


def test_a_network_upscaler_adds_its_upscale_jobs_estimate(app):
    """The hires fix's network is counted as POST /upscale's job of the same picture is: the
    first pass, that job's estimate, then the second pass (a filter's own time is not
    counted: the same passes with Lanczos)."""
    asked = {**FIRST, "hires": "true"}
    lanczos = estimate(app, **asked, hires_upscaler="Lanczos")
    network = estimate(app, **asked, hires_upscaler=NETWORK)
    upscaled = upscale_by_network(app, "teal")
    job = app.backend.jobs.lookup(upscaled.headers["X-Job-Id"])
    upscale_estimate = image_cost(app.backend.jobs.timings.measurements(), job.parameters)
    assert upscale_estimate is not None and upscale_estimate.seconds > 1  # 36 MFLOP a pixel
    assert network["image_seconds"] > lanczos["image_seconds"]
    assert network["image_seconds"] == pytest.approx(
        lanczos["image_seconds"] + upscale_estimate.seconds, abs=0.1 + 1e-9
    )  # each figure rounded up to tenths
    assert network["steps"] == lanczos["steps"] and network["size"] == lanczos["size"]


def test_a_body_as_post_generate_takes_it_is_estimated_as_its_query(app):
    """POST /generate/estimate: a JSON body's `hires` object and `loras`, or the form."""
    url = app.url("/generate/estimate")
    query = estimate(app, **FIRST, hires="true", hires_steps="3")
    body = {**FIRST, "steps": 2, "async": True, "hires": {"steps": 3}}
    posted = requests.post(url, json=body, timeout=30)
    assert posted.status_code == 200, posted.text
    assert posted.json() == query and query["steps"] == 5
    form = requests.post(url, data={**FIRST, "hires": "true", "hires_steps": "3"}, timeout=30)
    assert form.json() == query
    lora = {"prompt": "a lamp", "size": "64x64", "loras": [{"name": RECIPE}]}
    assert requests.post(url, json=lora, timeout=30).json()["steps"] == 8
    bad = {**body, "hires": {"colour": "red"}}
    refused = requests.post(url, json=bad, timeout=30)
    assert refused.status_code == 400
    generated = requests.post(app.url("/generate"), json=bad, timeout=30)
    assert refused.json() == generated.json() and "hires_colour" in refused.text
    image = requests.post(url, json={**body, "image": "aGVsbG8="}, timeout=30)
    assert image.status_code == 400 and "image: an estimate reads no image" in image.text


def test_the_document_lists_free_text_under_post_only(app):
    """A query line has 8190 bytes (config/gunicorn.py): GET's document lists the fields that
    always fit, POST's body every field (GET still reads a prompt's tags that fit, above)."""
    paths = requests.get(app.url("/api/openapi.json"), timeout=30).json()["paths"]
    listed = {p["name"] for p in paths["/generate/estimate"]["get"]["parameters"]}
    assert {"model", "hires", "hires_upscaler", "hires_scale", "steps", "n"} <= listed
    assert not listed & {"prompt", "lora", "negative_prompt", "hires_prompt", "webhook_url"}
    body = paths["/generate/estimate"]["post"]["requestBody"]["content"]["application/json"]
    assert {"prompt", "lora", "loras", "hires", "n", "image_size"} <= set(
        body["schema"]["properties"]
    )
    assert not {"image", "mask", "async"} & set(body["schema"]["properties"])


TOO_LARGE = "must be larger than the first pass and at most 512 pixels a side (GEN_MAX_SIDE)"
REFUSALS = [
    ({"hires_scale": "2"}, "hires_scale", "applies with hires=true only"),
    ({"hires": "true", "hires_scale": "9"}, "hires_scale", TOO_LARGE),
    ({"hires": "true", "hires_upscaler": "nope"}, "hires_upscaler", "neither a latent mode"),
    ({"hires": "true", "hires_strength": "0"}, "hires_strength", "greater than 0"),
    ({"prompt": "a lamp <lora:nope>"}, "prompt", "nope"),
    ({"lora": f"{RECIPE}:9"}, "lora", "[-4, 4]"),
    ({"model": "nope"}, "model", "nope"),  # the model, whose preset the estimate follows
]


@pytest.mark.parametrize(("fields", "name", "rule"), REFUSALS)
def test_bad_hires_or_lora_input_is_the_400_of_generate(app, fields, name, rule):
    before = len(app.backend.jobs.recent(1000))
    sent = {**FIRST, **fields}
    refused = requests.get(app.url("/generate/estimate"), params=sent, timeout=30)
    generated = requests.post(app.url("/generate"), data=sent, timeout=30)
    assert (refused.status_code, generated.status_code) == (400, 400), refused.text
    message = refused.json()["error"]["message"]
    assert name in message and rule in message, message
    assert message == generated.json()["error"]["message"]
    assert len(app.backend.jobs.recent(1000)) == before


def test_an_edits_estimate_refuses_the_hires_fix_naming_its_image_size(app):
    """An estimate's edit is marked by its input's size: the hires fix is text-to-image's."""
    sent = {**FIRST, "hires": "true", "image_size": "64x64"}
    refused = requests.get(app.url("/generate/estimate"), params=sent, timeout=30)
    assert refused.status_code == 400
    message = refused.json()["error"]["message"]
    assert "hires" in message and "send no `image_size`" in message, message


# --- the network: one cache with POST /upscale, tiles by UPSCALE_TILE_MEMORY ---------------


def upscale_by_network(app, colour: str) -> requests.Response:
    """A 64x64 picture of `colour` doubled by the tiny network through POST /upscale."""
    buffer = io.BytesIO()
    Image.new("RGB", (64, 64), colour).save(buffer, format="PNG")
    upscaled = requests.post(
        app.url("/upscale"), data={"upscaler": NETWORK, "scale": "2"},
        files={"image": ("a.png", buffer.getvalue(), "image/png")}, timeout=120,
    )  # fmt: skip
    assert upscaled.status_code == 200, upscaled.text
    return upscaled


@pytest.fixture
def network_loads(app, monkeypatch) -> list[Path]:
    """The upscaler files loaded from here on, the offered upscalers' cache emptied first."""
    monkeypatch.setattr(app.backend.upscalers, "_loaded", {})  # nothing loaded yet
    loads: list[Path] = []
    load = upscaler_module.load_model_upscaler

    def counted(path: Path, **kwargs: Any) -> Any:
        loads.append(path)
        return load(path, **kwargs)

    monkeypatch.setattr(upscaler_module, "load_model_upscaler", counted)
    return loads


def test_hires_and_post_upscale_load_the_network_once(app, network_loads):
    loads = network_loads
    made_job(app, **FIRST, hires="true", hires_upscaler=NETWORK)
    upscale_by_network(app, "olive")
    made_job(app, **FIRST, hires="true", hires_upscaler=NETWORK, hires_scale="1.5")
    assert [path.name for path in loads] == [f"{NETWORK}.pth"]


class Checks:
    """A Report that counts the stop checks of each phase: a network checks before each tile."""

    def __init__(self) -> None:
        self.now, self.checks = "", Counter[str]()

    def stop_requested(self) -> bool:
        self.checks[self.now] += 1
        return False

    def denoising(self, steps: int) -> None:
        pass

    def step(self, done: int, total: int) -> None:
        pass

    def phase(self, text: str) -> None:
        self.now = text

    def preview(self, preview: Preview) -> None:
        pass


def upscaling_checks(app: LoopbackApp, store: Path, upscaling: Upscaling) -> int:
    """The stop checks of a 96x96 -> 192x192 hires fix's upscaling phase with the network."""
    hires = Hires(upscaler=NETWORK, path=NETWORK_PATH, scale=2, size=(192, 192), steps=1)
    request = with_defaults(
        GenerationRequest(prompt="tiles", size=(96, 96), steps=1, seed=1, hires=hires),
        rules=app.backend.rules,
    )
    report = Checks()
    outcome = run_job(
        job_id="j", loader=app.backend.loader, store=ImageStore(store), request=request,
        queued_seconds=0, load_timeout=60, report=report, upscaling=upscaling,
    )  # fmt: skip
    assert outcome.state is JobState.SUCCEEDED, outcome
    return report.checks["upscaling"]


def test_a_hires_networks_tiles_follow_upscale_tile_memory(app, tmp_path):
    """The job runner's Upscaling of each setting, as the backend builds it (upscaling_of):
    this module's 12 MiB cuts the 96x96 picture into 3x3 tiles, 1 GiB runs it whole."""
    offered, shelf = app.backend.upscalers, app.backend.shelf
    small = upscaling_of(offered, shelf)
    with override_settings(UPSCALE_TILE_MEMORY=2**30):
        large = upscaling_of(offered, shelf)
    network = offered.find(NETWORK)
    side = tile_side(budget_bytes=TILE_MEMORY, width=96, height=96, shape=X4,
                     margin=network.margin)  # fmt: skip
    tiles = len(plan_tiles(width=96, height=96, side=side, margin=network.margin))
    assert tiles == 9
    few, many = (upscaling_checks(app, tmp_path / name, u) for name, u in
                 (("large", large), ("small", small)))  # fmt: skip
    assert many - few == tiles - 1  # one check a tile, the rest of the phase's the same


def test_distributed_a_worker_runs_a_hires_network_from_its_own_offered_upscalers(
    app, tmp_path, redis_server: RedisServer, network_loads
):
    """A worker's runtime as `manage.py run_worker` makes it (solo_worker: its jobs on a real
    redis-server), on this module's loaded model: the hires fix's network is the worker's
    offered one, loaded once with its upscale jobs'; a worker offering none fails the job
    saying so."""
    offered = app.backend.upscalers
    loads = network_loads
    hires = Hires(upscaler=NETWORK, path=NETWORK_PATH, scale=2, size=(128, 128), steps=1)
    request = with_defaults(
        GenerationRequest(prompt="distributed", size=(64, 64), steps=1, seed=1, hires=hires),
        rules=app.backend.rules,
    )
    images = tmp_path / "images"
    buffer = io.BytesIO()
    Image.new("RGB", (32, 32), "navy").save(buffer, format="PNG")
    upscale = UpscaleRequest(
        source=ImageStore(images).save_input(buffer.getvalue()), upscaler=NETWORK, scale=4,
        width=128, height=128, source_width=32, source_height=32, network_pixels=32 * 32,
    )  # fmt: skip
    with solo_worker(app.backend.loader, images, redis_server) as worker:
        worker.runtime.upscaling = Upscaling(offered, TILE_MEMORY)
        for job in (request, GenerationRequest(prompt="", upscale=upscale)):
            done = worker.board.wait(worker.submit(job), 120)
            assert done is not None and done.state is JobState.SUCCEEDED, done
        assert done.image is not None and done.image.parameters.upscale is not None
        worker.runtime.upscaling = None  # a worker with no UPSCALERS
        failed = worker.board.wait(worker.submit(request), 120)
    assert failed is not None and failed.state is JobState.FAILED, failed
    assert f"the upscaler {NETWORK} is not offered here" in (failed.error or "")
    assert [path.name for path in loads] == [f"{NETWORK}.pth"]
