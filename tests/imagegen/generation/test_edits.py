"""Edits on the real tiny pipeline, in process through Django's whole stack (POST /generate
as multipart, the job queue, the image store): the steps that run, the pixels an inpainting
keeps, the same bytes for the same seed, the pipelines sharing the loaded one's weights,
what the record keeps, and every bad upload refused with nothing written or queued."""

import hashlib
import io
import json
import os
import time
from pathlib import Path

import numpy as np
import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.test import Client
from PIL import Image

from imagegen import backend, services
from imagegen.generation.edit_inputs import prepared_inputs
from imagegen.generation.framing import Region
from imagegen.generation.images import GenerationParameters
from imagegen.generation.jobs import JobQueue
from imagegen.generation.masks import blurred_mask
from imagegen.generation.parameters import edit_parameters
from imagegen.generation.render import render
from imagegen.generation.requests import (
    MASK_BLUR_DEFAULT,
    ONLY_MASKED_PADDING_DEFAULT,
    STRENGTH_DEFAULT,
    EditRequest,
)
from imagegen.model.edit_pipelines import edit_pipeline
from imagegen.model.loader import ModelLoader
from imagegen.model.pipeline import load_pipeline
from tests.support.framing import check_framed, middle_mark
from tests.support.loaders import pulled_loader, serve
from tests.support.model_service import SD_REPO, SDXL_REPO

SIZE = 64
# The marked square of MASK, and how far past it the blur may reach (twice mask_blur 4).
SQUARE = (24, 24, 40, 40)
REACH = 8


@pytest.fixture(scope="module")
def loader(hub_root: Path, tmp_path_factory: pytest.TempPathFactory) -> ModelLoader:
    """The model pulled and loaded once for the module; each test has a queue of its own."""
    return pulled_loader(hub_root, tmp_path_factory.mktemp("edits"))


@pytest.fixture
def queue(loader: ModelLoader, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> JobQueue:
    return serve(loader, tmp_path / "images", monkeypatch)


def png(image: Image.Image) -> bytes:
    buffer = io.BytesIO()
    image.save(buffer, format="PNG")
    return buffer.getvalue()


def source_image(size: tuple[int, int] = (SIZE, SIZE)) -> Image.Image:
    """Noise: every pixel its own, so a changed one shows."""
    pixels = np.random.default_rng(5).integers(0, 256, (size[1], size[0], 3), dtype=np.uint8)
    return Image.fromarray(pixels, "RGB")


def mask_image() -> Image.Image:
    mask = Image.new("L", (SIZE, SIZE))
    mask.paste(255, SQUARE)
    return mask


def far_from_square() -> np.ndarray:
    """Where a pixel is farther than REACH (Euclidean) from every pixel of SQUARE."""
    ys, xs = np.indices((SIZE, SIZE))
    left, top, right, bottom = SQUARE  # right and bottom exclusive
    dx = np.maximum(np.maximum(left - xs, xs - (right - 1)), 0)
    dy = np.maximum(np.maximum(top - ys, ys - (bottom - 1)), 0)
    return dx * dx + dy * dy > REACH * REACH


def edit(client: Client, *, mask: bool = True, **fields: str):
    parts = {"image": SimpleUploadedFile("in.png", png(source_image()), "image/png")}
    if mask:
        parts["mask"] = SimpleUploadedFile("mask.png", png(mask_image()), "image/png")
    return client.post("/generate", {"prompt": "a red door", "seed": "4", **fields, **parts})


def pixels(content: bytes) -> np.ndarray:
    return np.asarray(Image.open(io.BytesIO(content)).convert("RGB"))


def assert_kept_beyond_the_edge_and_repainted(content: bytes) -> None:
    """An inpainting of source_image() with mask_image(): every pixel farther than REACH from
    the square is the input's, exactly, and the square itself is repainted."""
    out, sent = pixels(content), np.asarray(source_image())
    far = far_from_square()
    assert (out[far] == sent[far]).all()  # exactly the input's
    left, top, right, bottom = SQUARE
    inside = (out[top:bottom, left:right] != sent[top:bottom, left:right]).any(axis=-1)
    assert inside.mean() > 0.9  # repainted


def test_an_inpainting_keeps_every_pixel_beyond_the_blurred_edge_and_repaints_the_square(queue):
    answer = edit(Client(), steps="4", strength="1")
    assert answer.status_code == 200, answer.content
    assert_kept_beyond_the_edge_and_repainted(answer.content)


def test_an_img2img_runs_int_steps_times_strength_and_says_so(queue):
    client = Client()
    answer = edit(client, mask=False, steps="8", strength="0.5", scheduler="euler")
    assert answer.status_code == 200, answer.content
    assert (answer["X-Steps"], answer["X-Strength"]) == ("4", "0.5")
    record = client.get(f"/images/{answer['X-Image-Id']}").json()["parameters"]
    assert (record["steps"], record["edit"]["steps_run"], record["edit"]["strength"]) == (8, 4, 0.5)
    job = client.get(f"/jobs/{answer['X-Job-Id']}").json()
    assert (job["progress"]["step"], job["progress"]["steps"]) == (4, 4)
    text = Image.open(io.BytesIO(answer.content)).text["parameters"]
    assert "Steps: 8, " in text and ", Denoising strength: 0.5" in text
    changed = (pixels(answer.content) != np.asarray(source_image())).any(axis=-1)
    assert changed.mean() > 0.9  # img2img: the whole picture


@pytest.mark.parametrize(("steps", "strength", "calls"), [(8, 0.5, 4), (4, 0.1, 1), (5, 1.0, 5)])
def test_the_unet_is_called_once_per_step_of_the_rule(queue, steps, strength, calls):
    """Euler makes one timestep per step and classifier-free guidance one batched UNet call
    per timestep: the UNet's calls are the steps that ran."""
    unet = queue.loader.pipeline(60).unet
    seen = []
    hook = unet.register_forward_pre_hook(lambda *_: seen.append(1))
    try:
        answer = edit(Client(), steps=str(steps), strength=str(strength), scheduler="euler")
    finally:
        hook.remove()
    assert answer.status_code == 200, answer.content
    assert len(seen) == calls and answer["X-Steps"] == str(calls)


def test_the_same_seed_and_inputs_give_the_same_png_bytes(queue):
    client = Client()
    first, second = edit(client, steps="3"), edit(client, steps="3")
    assert first.status_code == second.status_code == 200
    assert first.content == second.content
    other = edit(client, steps="3", seed="5")
    assert other.content != first.content


def test_the_edit_pipelines_share_every_module_of_the_loaded_one(queue):
    pipe = queue.loader.pipeline(60)
    for inpaint in (False, True):
        built = edit_pipeline(pipe, inpaint=inpaint)
        assert built is edit_pipeline(pipe, inpaint=inpaint)  # built once
        for name in ("unet", "vae", "text_encoder", "tokenizer", "scheduler"):
            assert getattr(built, name) is getattr(pipe, name), name


def test_the_record_keeps_the_inputs_sha256_and_a_link_to_each(queue):
    client = Client()
    answer = edit(client, steps="2")
    assert answer.status_code == 200, answer.content
    record = client.get(f"/images/{answer['X-Image-Id']}").json()["parameters"]["edit"]
    for name, sent in (("source", png(source_image())), ("mask", png(mask_image()))):
        digest = hashlib.sha256(sent).hexdigest()
        assert record[name] == {"sha256": digest, "url": f"/images/inputs/{digest}"}
        stored = client.get(record[name]["url"])
        assert stored.status_code == 200 and stored["Content-Type"] == "image/png"
        assert b"".join(stored.streaming_content) == sent
    assert record["mask_blur"] == 4
    assert json.loads(Image.open(io.BytesIO(answer.content)).text["imagegen"])["edit"] == {**record}
    assert client.get("/images/inputs/" + "0" * 64).status_code == 404


def test_the_output_is_the_inputs_size_rounded_down_to_8_unless_a_size_is_sent(queue):
    client = Client()
    parts = {"image": SimpleUploadedFile("in.png", png(source_image((100, 75))), "image/png")}
    answer = client.post("/generate", {"prompt": "p", "steps": "2", **parts})
    assert answer.status_code == 200, answer.content
    assert answer["X-Size"] == "96x72"
    assert Image.open(io.BytesIO(answer.content)).size == (96, 72)
    parts = {"image": SimpleUploadedFile("in.png", png(source_image((100, 75))), "image/png")}
    answer = client.post("/generate", {"prompt": "p", "steps": "2", "size": "64x80", **parts})
    assert Image.open(io.BytesIO(answer.content)).size == (64, 80)


def test_an_async_edit_is_an_ordinary_job_with_its_edit_in_its_parameters(queue):
    client = Client()
    started = edit(client, steps="2", **{"async": "true"})
    assert started.status_code == 202, started.content
    job = started.json()
    assert job["parameters"]["edit"]["strength"] == 0.75
    assert job["parameters"]["size"] == [SIZE, SIZE]  # the input's, known from the start
    assert job["id"] in [listed["id"] for listed in client.get("/jobs").json()]
    done = queue.wait(job["id"], 60)
    assert done is not None and done.state.value == "succeeded"
    assert done.image is not None and done.image.parameters.edit is not None


def test_an_edit_sent_without_its_settings_runs_with_the_defaults(queue):
    """Strength, mask_blur and the "only masked" padding left out take the defaults
    (imagegen.generation.requests.edit_settings), and the job says so from the start."""
    started = edit(Client(), steps="1", only_masked="true", **{"async": "true"})
    assert started.status_code == 202, started.content
    sent = started.json()["parameters"]["edit"]
    assert (sent["strength"], sent["mask_blur"]) == (STRENGTH_DEFAULT, MASK_BLUR_DEFAULT)
    assert sent["only_masked"]["padding"] == ONLY_MASKED_PADDING_DEFAULT
    done = queue.wait(started.json()["id"], 60)
    assert done is not None and done.state.value == "succeeded"


def test_a_running_edit_is_cancelled_like_any_job(queue):
    client = Client()
    started = edit(client, steps="100", strength="1", **{"async": "true"})
    assert started.status_code == 202, started.content
    job_id = started.json()["id"]
    while (view := queue.lookup(job_id)) is not None and view.progress.step < 1:
        queue.wait_change(job_id, view.revision, 30)
    assert client.delete(f"/jobs/{job_id}").status_code == 200
    done = queue.wait(job_id, 60)
    assert done is not None and done.state.value == "cancelled"


@pytest.mark.parametrize("repo", [SD_REPO, SDXL_REPO])
def test_both_layouts_inpaint_from_the_loaded_pipelines_modules(hub_root, repo):
    """SD 1.x and SDXL each get their inpainting pipeline around the loaded modules (SDXL's
    second text encoder too), and keep the pixels outside the mask's reach."""
    pipe = load_pipeline(hub_root / repo, variant="fp16", device="cpu")
    built = edit_pipeline(pipe, inpaint=True)
    for name in ("unet", "vae", "text_encoder", "text_encoder_2"):
        assert getattr(built, name, None) is getattr(pipe, name, None), name
    edit_request = EditRequest(source="0" * 64, mask="1" * 64, strength=1.0)
    parameters = GenerationParameters(
        prompt="a door", negative_prompt=None, steps=2, guidance=5.0, width=SIZE, height=SIZE,
        seed=3, scheduler="Euler", model_id=repo, revision=None,
        edit=edit_parameters(edit_request, steps=2),
    )  # fmt: skip
    inputs = prepared_inputs(
        png(source_image()), png(mask_image()), size=(SIZE, SIZE), steps=2, edit=edit_request
    )
    rendered = render(
        pipe, parameters, scheduler="euler", device="cpu", home="cpu",
        on_step=lambda done, total: None, stop_requested=lambda: False, edit=inputs,
    )  # fmt: skip
    out, sent = np.asarray(rendered.image), np.asarray(source_image())
    assert (out[far_from_square()] == sent[far_from_square()]).all()


def noise(size: tuple[int, int], seed: int) -> Image.Image:
    pixels = np.random.default_rng(seed).integers(0, 256, (size[1], size[0], 3), dtype=np.uint8)
    return Image.fromarray(pixels, "RGB")


@pytest.mark.parametrize(("mode", "runs"), [(0, 0), (1, 1), (2, 2), (3, 0)])
def test_a_size_of_another_shape_frames_the_input_by_its_resize_mode(queue, mode, runs):
    """A mask marking one pixel in the middle, unblurred: the rest of the answer is the
    framed input itself."""
    source = noise((128, 64), 7)
    parts = {
        "image": SimpleUploadedFile("in.png", png(source), "image/png"),
        "mask": SimpleUploadedFile("m.png", png(middle_mark()), "image/png"),
    }
    client = Client()
    answer = client.post("/generate", {"prompt": "p", "steps": "2", "size": "64x64",
                                       "resize_mode": str(mode), "mask_blur": "0",
                                       **parts})  # fmt: skip
    assert answer.status_code == 200, answer.content
    check_framed(pixels(answer.content), source, runs)
    record = client.get(f"/images/{answer['X-Image-Id']}").json()["parameters"]
    assert record["edit"]["resize_mode"] == runs


def test_only_masked_works_the_cut_out_smaller_and_keeps_the_rest_exactly(queue):
    """A 16-pixel square in 128x128: its box grown by twice mask_blur (8) and the padding
    (4) is 40 wide, worked at 64x64 (40 rounded up to 8, then GEN_MIN_SIDE) rather than the
    whole 128x128."""
    source, mask = noise((128, 128), 9), Image.new("L", (128, 128))
    mask.paste(255, (56, 56, 72, 72))
    unet = queue.loader.pipeline(60).unet
    seen: list[tuple[int, ...]] = []
    hook = unet.register_forward_pre_hook(lambda _m, args: seen.append(tuple(args[0].shape[-2:])))
    try:
        answers = {
            only: Client().post("/generate", {
                "prompt": "a red door", "seed": "4", "steps": "2", "strength": "1",
                "image": SimpleUploadedFile("in.png", png(source), "image/png"),
                "mask": SimpleUploadedFile("m.png", png(mask), "image/png"),
                **({"only_masked": "true", "only_masked_padding": "4"} if only else {}),
            })
            for only in (True, False)
        }  # fmt: skip
    finally:
        hook.remove()
    answer = answers[True]
    assert answer.status_code == 200, answer.content
    assert Image.open(io.BytesIO(answer.content)).size == (128, 128)
    half = len(seen) // 2
    assert seen[0][0] * 2 == seen[half][0]  # the cut-out's latents: half the whole's side
    out, sent = pixels(answer.content), np.asarray(source)
    ys, xs = np.indices((128, 128))
    dx = np.maximum(np.maximum(56 - xs, xs - 71), 0)
    dy = np.maximum(np.maximum(56 - ys, ys - 71), 0)
    far = dx * dx + dy * dy > 8 * 8
    assert (out[far] == sent[far]).all()
    assert (out[56:72, 56:72] != sent[56:72, 56:72]).any(axis=-1).mean() > 0.9
    record = Client().get(f"/images/{answer['X-Image-Id']}").json()["parameters"]["edit"]
    assert record["only_masked"] == {"padding": 4, "box": [44, 44, 84, 84], "size": [64, 64]}
    again = Client().post("/generate", {
        "prompt": "a red door", "seed": "4", "steps": "2", "strength": "1",
        "only_masked": "true", "only_masked_padding": "4",
        "image": SimpleUploadedFile("in.png", png(source), "image/png"),
        "mask": SimpleUploadedFile("m.png", png(mask), "image/png"),
    })  # fmt: skip
    assert again.content == answer.content  # the same seed and inputs, the same bytes


def test_only_masked_pastes_the_worked_cut_out_back_over_its_box(queue):
    """The render of an "only masked" edit, against the same worked by hand: the box cut
    from the picture and the blurred mask, the inpainting pipeline run on it alone at the
    working size, its answer scaled back over the box, the input pasted back beyond the
    mask's reach."""
    import torch

    pipe = queue.loader.pipeline(60)
    source, mask = noise((128, 128), 9), Image.new("L", (128, 128))
    mask.paste(255, (56, 56, 72, 72))
    box, lanczos = (44, 44, 84, 84), Image.Resampling.LANCZOS
    request = EditRequest(source="0" * 64, mask="1" * 64, strength=1.0,
                          only_masked=Region(padding=4, box=box, size=(64, 64)))  # fmt: skip
    parameters = GenerationParameters(
        prompt="a door", negative_prompt=None, steps=2, guidance=5.0, width=128, height=128,
        seed=3, scheduler="PNDM", model_id=SD_REPO, revision=None,
        edit=edit_parameters(request, steps=2),
    )  # fmt: skip
    inputs = prepared_inputs(png(source), png(mask), size=(128, 128), steps=2, edit=request)
    rendered = render(
        pipe, parameters, scheduler=None, device="cpu", home="cpu",
        on_step=lambda done, total: None, stop_requested=lambda: False, edit=inputs,
    )  # fmt: skip
    blurred = blurred_mask(mask, 4)
    worked = edit_pipeline(pipe, inpaint=True)(
        prompt="a door", num_inference_steps=2, guidance_scale=5.0, width=64, height=64,
        image=source.crop(box).resize((64, 64), lanczos),
        mask_image=blurred.crop(box).resize((64, 64), lanczos), strength=1.0,
        generator=torch.Generator("cpu").manual_seed(3),
    ).images[0]  # fmt: skip
    whole = source.copy()
    whole.paste(worked.resize((40, 40), lanczos), box[:2])
    expected = Image.composite(whole, source, blurred)
    assert (np.asarray(rendered.image) == np.asarray(expected)).all()


def test_an_edits_inputs_go_with_the_last_image_that_names_them(queue, tmp_path: Path):
    """The source is the user's picture: deleting what was made from it removes it (and the
    mask), unless another image still names it; GET /images/inputs/<sha256> then 404."""
    client = Client()
    first, second = edit(client, steps="2"), edit(client, steps="2", seed="5")
    assert first.status_code == second.status_code == 200, first.content
    record = client.get(f"/images/{first['X-Image-Id']}").json()["parameters"]["edit"]
    links = [record["source"]["url"], record["mask"]["url"]]
    assert client.delete(f"/images/{first['X-Image-Id']}").status_code == 200
    assert all(client.get(link).status_code == 200 for link in links)  # the second names them
    assert client.delete(f"/images/{second['X-Image-Id']}").status_code == 200
    assert all(client.get(link).status_code == 404 for link in links)
    assert list((tmp_path / "images" / "inputs").iterdir()) == []


def test_a_refused_edit_leaves_no_input_behind(queue, tmp_path: Path, monkeypatch):
    monkeypatch.setattr(queue, "queue_max", -1)  # full: 503 after the inputs were stored
    answer = edit(Client(), steps="2")
    assert answer.status_code == 503, answer.content
    assert list((tmp_path / "images" / "inputs").iterdir()) == []


def test_an_orphan_input_goes_at_the_next_prune_once_ten_minutes_old(queue, tmp_path: Path):
    """An input nothing names (left by a crash) is removed with the next image deleted or
    edit refused once INPUT_GRACE_SECONDS old; a younger one may be on its way to a job."""
    store = backend.current_backend().images
    old, young = store.save_input(b"old orphan"), store.save_input(b"young orphan")
    aged = time.time() - services.INPUT_GRACE_SECONDS - 1
    os.utime(store.input_path(old), (aged, aged))
    made = edit(Client(), steps="2")
    assert Client().delete(f"/images/{made['X-Image-Id']}").status_code == 200
    assert not store.input_path(old).exists() and store.input_path(young).exists()


def test_deleting_a_text_to_image_image_reads_no_record_for_inputs(queue, monkeypatch):
    """The prune reads every record on the share: only an edit's delete needs it."""
    store = backend.current_backend().images
    store.save_input(b"an input nothing names")  # so there is something it could prune
    made = Client().post("/generate", {"prompt": "plain", "steps": "2", "size": "64x64"})
    assert made.status_code == 200, made.content

    def refuse():
        raise AssertionError("every record read for a text-to-image delete")

    monkeypatch.setattr(type(store), "records", lambda self: refuse())
    assert Client().delete(f"/images/{made['X-Image-Id']}").status_code == 200
