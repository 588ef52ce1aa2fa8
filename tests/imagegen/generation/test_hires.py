"""Hires fix on text-to-image, on the tiny SD pipeline in process (served_here): a first pass at
64x64, the upscale (a latent mode, Pillow's Lanczos, a tiny random x4 ESRGAN), an img2img at
128x128 with the loaded pipeline's components; one job whose phases the events show, its record
and infotext as A1111 writes them, webuiapi's `enable_hr` unchanged, the native JSON object and
form fields, and every bad setting a 400 naming its field with nothing queued. Cancel in each
phase and the estimate are held on the job runner itself, at the end."""

import base64
import io
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests
import webuiapi
from PIL import Image

from imagegen.generation.estimates import Measurements, Timing, image_cost, measured
from imagegen.generation.execution import run_job
from imagegen.generation.hires import Hires
from imagegen.generation.images import ImageRecord, ImageStore
from imagegen.generation.job_board import JobState
from imagegen.generation.parameters import with_defaults
from imagegen.generation.previews import Preview
from imagegen.generation.render import Cancelled
from imagegen.generation.requests import GenerationRequest
from tests.support.in_process import LoopbackApp, ready_here
from tests.support.model_service import SDXL_REPO
from tests.support.tiny_upscaler import ESRGAN_REPO, place_on_hub

UPSCALERS = f"{ESRGAN_REPO}:tiny-x4.pth"
FIRST = {"prompt": "a red cube", "size": "64x64", "steps": 2, "seed": 11, "guidance": 5}
MODES = [
    "Latent", "Latent (antialiased)", "Latent (bicubic)", "Latent (bicubic antialiased)",
    "Latent (nearest)", "Latent (nearest-exact)",
]  # fmt: skip


@pytest.fixture(scope="module")
def app(hub_root: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LoopbackApp]:
    place_on_hub(hub_root)
    work = tmp_path_factory.mktemp("hires")
    with ready_here(
        hub_root, work, UPSCALERS=UPSCALERS, GEN_MAX_SIDE="512", MODELS=SDXL_REPO
    ) as served:
        served.backend.upscalers.pull()
        yield served


def wait_until(check: Any, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.1)


def generate(app: LoopbackApp, body: dict[str, Any]) -> requests.Response:
    return requests.post(app.url("/generate"), json=body, timeout=300)


def image_of(answer: requests.Response) -> Image.Image:
    assert answer.status_code == 200, answer.text
    return Image.open(io.BytesIO(answer.content))


def job_of(app: LoopbackApp, answer: requests.Response) -> dict:
    return requests.get(app.url(f"/jobs/{answer.headers['X-Job-Id']}"), timeout=30).json()


def jobs(app: LoopbackApp) -> list[dict]:
    return requests.get(app.url("/jobs"), timeout=30).json()


def test_latent_upscale_modes_are_a1111s(app):
    listed = requests.get(app.url("/sdapi/v1/latent-upscale-modes"), timeout=30)
    assert listed.status_code == 200, listed.text
    assert listed.json() == [{"name": name} for name in MODES]


def test_a_latent_hires_fix_makes_the_larger_image_in_one_job_and_says_so(app):
    made = generate(app, {**FIRST, "hires": {"scale": 2}})
    image = image_of(made)
    assert image.size == (128, 128)
    assert (made.headers["X-Size"], made.headers["X-Hires-Size"]) == ("64x64", "128x128")
    assert made.headers["X-Steps"] == "4"  # both passes'
    job = job_of(app, made)
    assert job["parameters"]["hires"]["size"] == [128, 128]
    record = job["image"]
    assert record["parameters"]["width"] == 64  # the first pass's, as A1111's Size
    assert record["parameters"]["hires"] == {
        "upscaler": "Latent", "path": None, "scale": 2.0, "resize": None, "size": [128, 128],
        "steps": 2, "denoising_strength": 0.7, "prompt": None, "negative_prompt": None,
    }  # fmt: skip
    text = image.text["parameters"]
    assert text.endswith(
        "Size: 64x64, Model: testorg/tiny-sd"
        + text.split("Model: testorg/tiny-sd")[1].split(",")[0]
        + ", Model hash: "
        + record["parameters"]["revision"][:10]
        + ", Denoising strength: 0.7, Hires upscale: 2, Hires steps: 2, Hires upscaler: Latent"
    )
    # Two sizes in one job: no measurement of either for the estimates.
    assert measured(ImageRecord.model_validate(record), home=record["device"]) is None
    # The same request and seed: the same picture; another mode: another one.
    again = image_of(generate(app, {**FIRST, "hires": {"scale": 2}}))
    assert again.tobytes() == image.tobytes()
    nearest = image_of(generate(app, {**FIRST, "hires": {"upscaler": "latent (nearest)"}}))
    assert nearest.size == (128, 128)
    assert nearest.tobytes() != image.tobytes()


def test_the_second_pass_runs_its_own_steps_whatever_the_strength(app):
    made = generate(app, {**FIRST, "hires": {"steps": 3, "strength": 0.3, "width": 96}})
    assert image_of(made).size == (96, 96)
    job = job_of(app, made)
    assert job["progress"]["steps"] == 2 + 3
    assert job["parameters"]["hires"]["resize"] == [96, 0]


def test_without_a_size_the_first_pass_is_the_models_own_and_hires_prompt_is_the_seconds(app):
    body = {key: value for key, value in FIRST.items() if key != "size"}
    plain = image_of(generate(app, {**body, "hires": {}}))
    assert plain.size == (128, 128)  # the tiny model's own 64x64, times 2
    other = image_of(generate(app, {**body, "hires": {"prompt": "a green cone"}}))
    assert other.tobytes() != plain.tobytes()
    assert "Hires upscaler: Latent, Hires prompt: a green cone" in other.text["parameters"]


def test_an_offered_upscaler_not_on_the_share_is_a_409_nothing_queued(app):
    manifest = (
        Path(app.env["MODEL_DIR"]) / "upscalers/testorg--tiny-esrgan/.tiny-x4.pth.manifest.json"
    )
    kept = manifest.read_bytes()
    before = len(jobs(app))
    manifest.unlink()
    try:
        refused = generate(app, {**FIRST, "async": True, "hires": {"upscaler": "tiny-x4"}})
    finally:
        manifest.write_bytes(kept)
    assert refused.status_code == 409, refused.text
    assert "hires_upscaler: the upscaler tiny-x4 is offered but not on the share" in refused.text
    assert len(jobs(app)) == before


def test_the_form_fields_run_an_upscaler_and_the_esrgan_file(app):
    form = {key: str(value) for key, value in FIRST.items()}
    lanczos = requests.post(
        app.url("/generate"),
        data={**form, "hires": "true", "hires_upscaler": "lanczos", "hires_scale": "1.5"},
        timeout=300,
    )
    assert image_of(lanczos).size == (96, 96)
    assert (
        "Hires upscale: 1.5, Hires steps: 2, Hires upscaler: Lanczos"
        in (image_of(lanczos).text["parameters"])
    )
    esrgan = generate(app, {**FIRST, "hires": {"upscaler": "tiny-x4", "strength": 0.5}})
    assert image_of(esrgan).size == (128, 128)
    hires = job_of(app, esrgan)["parameters"]["hires"]
    assert (hires["upscaler"], hires["path"]) == (
        "tiny-x4",
        "upscalers/testorg--tiny-esrgan/tiny-x4.pth",
    )


def test_the_events_show_the_passes(app):
    """Each pass lasts its steps (20 here); a latent upscale is too short to be seen between
    two events, so its phase is held on the job runner below (test_the_phases_come_in_order)."""
    body = {**FIRST, "steps": 20, "seed": 12, "async": True, "hires": {}}
    started = generate(app, body)
    assert started.status_code == 202, started.text
    job_id = started.json()["id"]
    with requests.get(app.url(f"/jobs/{job_id}/events"), stream=True, timeout=300) as stream:
        text = "".join(line + "\n" for line in stream.iter_lines(decode_unicode=True))
    phases = [
        json.loads(line[len("data: "):]).get("phase")
        for line in text.splitlines()
        if line.startswith("data: {")
    ]  # fmt: skip
    seen = [p for i, p in enumerate(phases) if p and (i == 0 or phases[i - 1] != p)]
    assert [p for p in seen if p in ("first pass", "second pass")] == [
        "first pass", "second pass"
    ], seen  # fmt: skip
    steps = [json.loads(line[len("data: "):]) for line in text.splitlines()
             if line.startswith("data: {") and '"step"' in line]  # fmt: skip
    assert steps and {s.get("steps") for s in steps if s.get("steps")} == {40}


def test_webuiapi_txt2img_with_enable_hr_works_unchanged(app):
    api = webuiapi.WebUIApi(baseurl=app.url("/sdapi/v1"))
    result = api.txt2img(
        prompt="a blue ball", seed=3, steps=2, width=64, height=64, enable_hr=True,
        hr_scale=2, hr_upscaler=webuiapi.HiResUpscaler.Latent, hr_second_pass_steps=3,
    )  # fmt: skip
    assert result.image.size == (128, 128)
    assert "Hires upscale: 2, Hires steps: 3, Hires upscaler: Latent" in result.info["infotexts"][0]
    assert "Denoising strength: 0.7" in result.info["infotexts"][0]
    assert result.info["denoising_strength"] == 0.7
    assert result.info["extra_generation_params"] == {
        "Hires upscale": 2, "Hires steps": 3, "Hires upscaler": "Latent"
    }  # fmt: skip
    plain = api.txt2img(prompt="a blue ball", seed=3, steps=2, width=64, height=64)
    assert plain.image.size == (64, 64)  # without enable_hr the hr_* fields webuiapi sends idle


TOO_LARGE = "must be larger than the first pass and at most 512 pixels a side (GEN_MAX_SIDE)"
A1111_REFUSALS = [
    ({"hr_scale": 1}, "hr_scale", "must be greater than 1"),
    ({"hr_scale": 16}, "hr_scale", TOO_LARGE),
    ({"hr_resize_x": 1024}, "hr_resize_x", TOO_LARGE),
    ({"hr_resize_y": 64}, "hr_resize_y", TOO_LARGE),  # no larger than the first pass
    ({"hr_upscaler": "SwinIR 4x"}, "hr_upscaler", "is neither a latent mode nor an offered"),
    ({"denoising_strength": 0}, "denoising_strength", "must be greater than 0 and at most 1"),
    ({"denoising_strength": 1.5}, "denoising_strength", "must be greater than 0 and at most 1"),
]


@pytest.mark.parametrize(("fields", "name", "rule"), A1111_REFUSALS)
def test_a1111_bad_hires_settings_are_a_400_naming_the_field_nothing_queued(
    app, fields, name, rule
):
    before = len(jobs(app))
    body = {"prompt": "refused", "width": 64, "height": 64, "enable_hr": True, **fields}
    refused = requests.post(app.url("/sdapi/v1/txt2img"), json=body, timeout=60)
    assert refused.status_code == 400, refused.text
    message = refused.json()["error"]["message"]
    assert f"{name}: " in message and rule in message, message
    assert len(jobs(app)) == before


NATIVE_REFUSALS = [
    ({"hires": {"scale": 0.5}}, "hires_scale", "greater than 1"),
    ({"hires": {"scale": 9}}, "hires_scale", TOO_LARGE),
    ({"hires": {"width": 1024}}, "hires_width", "less than or equal to 512"),
    ({"hires": {"upscaler": "nope"}}, "hires_upscaler", "offered: Latent, Latent (antialiased)"),
    ({"hires": {"strength": 0}}, "hires_strength", "greater than 0"),
    ({"hires": {"colour": "red"}}, "hires_colour", "is not a field of this form"),
    ({"hires_scale": 2}, "hires_scale", "applies with hires=true only"),
    ({"hires": {}, "image": base64.b64encode(b"x").decode()}, "hires", "text-to-image only"),
]


@pytest.mark.parametrize(("fields", "name", "rule"), NATIVE_REFUSALS)
def test_native_bad_hires_settings_are_a_400_naming_the_field_nothing_queued(
    app, fields, name, rule
):
    before = len(jobs(app))
    refused = generate(app, {**FIRST, "async": True, **fields})
    assert refused.status_code == 400, refused.text
    message = refused.json()["error"]["message"]
    assert name in message and rule in message, message
    assert len(jobs(app)) == before


@pytest.mark.parametrize("upscaler", ["Latent (bicubic antialiased)", "Nearest"])
def test_the_sdxl_pipeline_runs_a_hires_fix_too(app, upscaler):
    """SDXL's img2img takes the latents (and sizes) of its own txt2img as SD's does."""
    pulled = requests.post(app.url("/model/pull"), data={"model": SDXL_REPO}, timeout=30)
    assert pulled.status_code in (200, 202), pulled.text
    models = app.url("/model/status")
    wait_until(lambda: requests.get(models, timeout=30).json()["models"][1]["state"] == "ready")
    made = generate(app, {**FIRST, "model": SDXL_REPO, "hires": {"upscaler": upscaler}})
    assert image_of(made).size == (128, 128)
    assert made.headers["X-Model"] == SDXL_REPO


# --- the job runner itself: cancel in each phase, and the estimate --------------------------


class StopAt:
    """A Report that asks to stop once `phase` is announced, and keeps the steps it saw."""

    def __init__(self, phase: str) -> None:
        self.at, self.phases, self.steps = phase, [], []

    def stop_requested(self) -> bool:
        return self.at in self.phases

    def denoising(self, steps: int) -> None:
        self.phases.append("denoising")

    def step(self, done: int, total: int) -> None:
        self.steps.append((done, total))
        if self.stop_requested():
            raise Cancelled()

    def phase(self, text: str) -> None:
        self.phases.append(text)

    def preview(self, preview: Preview) -> None:
        pass


@pytest.mark.parametrize(
    ("phase", "last_step"), [("first pass", None), ("upscaling", 2), ("second pass", 2)]
)
@pytest.mark.parametrize("upscaler", ["Latent", "tiny-x4"])
def test_a_cancel_stops_the_job_in_each_phase(app, tmp_path, phase, last_step, upscaler):
    path = "upscalers/testorg--tiny-esrgan/tiny-x4.pth" if upscaler == "tiny-x4" else None
    hires = Hires(upscaler=upscaler, path=path, scale=2, size=(128, 128))
    request = with_defaults(
        GenerationRequest(prompt="stopped", size=(64, 64), steps=2, seed=1, hires=hires),
        rules=app.backend.rules,
    )
    report = StopAt(phase)
    store = ImageStore(tmp_path)
    outcome = run_job(
        job_id="j", loader=app.backend.loader, store=store, request=request,
        queued_seconds=0, load_timeout=60, report=report, upscaling=app.backend.jobs.upscaling,
    )  # fmt: skip
    assert outcome.state is JobState.CANCELLED, outcome
    # Of 2 + 2 steps: none in the first pass; the second stopped before its first step ended.
    assert {total for _, total in report.steps} <= {4}
    assert max((done for done, _ in report.steps), default=None) == last_step
    assert ("second pass" in report.phases) is (phase == "second pass")  # where it stopped
    assert list(store.records()) == []


@pytest.mark.parametrize("upscaler", ["Latent", "tiny-x4"])
def test_the_phases_come_in_order(app, tmp_path, upscaler):
    path = "upscalers/testorg--tiny-esrgan/tiny-x4.pth" if upscaler == "tiny-x4" else None
    hires = Hires(upscaler=upscaler, path=path, scale=2, size=(128, 128))
    request = with_defaults(
        GenerationRequest(prompt="phases", size=(64, 64), steps=2, seed=1, hires=hires),
        rules=app.backend.rules,
    )
    report = StopAt("never")
    outcome = run_job(
        job_id="j", loader=app.backend.loader, store=ImageStore(tmp_path), request=request,
        queued_seconds=0, load_timeout=60, report=report, upscaling=app.backend.jobs.upscaling,
    )  # fmt: skip
    assert outcome.state is JobState.SUCCEEDED, outcome
    assert report.phases == ["denoising", "first pass", "upscaling", "second pass", "saving"]
    assert [done for done, _ in report.steps][-1] == 4


def test_the_estimate_counts_both_passes_and_the_upscale():
    small = Timing(64, 64, encode_seconds=1, step_seconds=2, decode_seconds=3)
    large = Timing(128, 128, encode_seconds=1, step_seconds=8, decode_seconds=12)
    measured = Measurements((small, large), native=(64, 64))
    plain = GenerationRequest(prompt="x", size=(64, 64), steps=4, guidance=1, seed=1)
    latent = plain.model_copy(
        update={"hires": Hires(upscaler="Latent", scale=2, size=(128, 128), steps=3)}
    )
    cost = image_cost(measured, latent)
    assert cost is not None
    # encode, 4 steps at 64, 3 at 128, the large decode (a latent upscale decodes once)
    assert cost.seconds == pytest.approx(1 + 4 * 2 + 3 * 8 + 12)
    assert cost.steps == 7
    decoded = latent.model_copy(update={"hires": latent.hires.model_copy(
        update={"upscaler": "Lanczos"})})  # fmt: skip
    # an upscaler's picture: the small decode too
    assert image_cost(measured, decoded).seconds == pytest.approx(1 + 4 * 2 + 3 * 8 + 12 + 3)
