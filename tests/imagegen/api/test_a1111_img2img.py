"""A1111's img2img and png-info in process (the real tiny pipeline, the job queue, the image
store, Django's whole stack): what each A1111 field does, and every bad input a 400 naming
its field with nothing stored or queued. webuiapi itself, over HTTP and in both job modes:
tests/imagegen/api/clients/test_webuiapi_img2img.py."""

import base64
import io
import json
import time
from pathlib import Path

import numpy as np
import pytest
from django.test import Client
from PIL import Image, PngImagePlugin

from imagegen import backend
from imagegen.generation.jobs import JobQueue
from tests.support.framing import check_framed, middle_mark
from tests.support.loaders import ready_loader, serve

SIZE = 64


@pytest.fixture
def queue(hub, share: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> JobQueue:
    loader = ready_loader(hub, share, tmp_path / "cache")
    return serve(loader, tmp_path / "images", monkeypatch)


def noise(size: tuple[int, int] = (SIZE, SIZE), seed: int = 5) -> Image.Image:
    pixels = np.random.default_rng(seed).integers(0, 256, (size[1], size[0], 3), dtype=np.uint8)
    return Image.fromarray(pixels, "RGB")


def b64(image: Image.Image, pnginfo: PngImagePlugin.PngInfo | None = None) -> str:
    buffer = io.BytesIO()
    image.save(buffer, format="PNG", pnginfo=pnginfo)
    return base64.b64encode(buffer.getvalue()).decode()


def square(box=(16, 16, 48, 48), size=(SIZE, SIZE)) -> Image.Image:
    mask = Image.new("L", size)
    mask.paste(255, box)
    return mask


def img2img(**body):
    sent = {"prompt": "a red door", "seed": 4, "steps": 2, **body}
    return Client().post("/sdapi/v1/img2img", sent, content_type="application/json")


def image_of(answer, index: int = 0) -> np.ndarray:
    data = base64.b64decode(answer.json()["images"][index])
    return np.asarray(Image.open(io.BytesIO(data)).convert("RGB"))


def test_a_masked_img2img_keeps_the_unmarked_pixels_and_says_what_ran(queue):
    answer = img2img(init_images=[b64(noise())], mask=b64(square()), denoising_strength=1,
                     inpaint_full_res=False)  # fmt: skip
    assert answer.status_code == 200, answer.content
    out, sent = image_of(answer), np.asarray(noise())
    assert out.shape == (SIZE, SIZE, 3)
    far = np.ones((SIZE, SIZE), bool)
    far[8:56, 8:56] = False  # beyond twice mask_blur (4) from the square, by any measure
    assert (out[far] == sent[far]).all()
    assert (out[16:48, 16:48] != sent[16:48, 16:48]).any(axis=-1).mean() > 0.9
    body = answer.json()
    info = json.loads(body["info"])
    assert info["denoising_strength"] == 1 and info["extra_generation_params"] == {"Mask blur": 4}
    assert "Denoising strength: 1, Mask blur: 4" in info["infotexts"][0]
    assert body["parameters"]["init_images"] is None and body["parameters"]["mask"] is None


def test_inpainting_mask_invert_repaints_the_black_and_keeps_the_white(queue):
    answer = img2img(init_images=[b64(noise())], mask=b64(square()), denoising_strength=1,
                     inpaint_full_res=False, inpainting_mask_invert=1)  # fmt: skip
    assert answer.status_code == 200, answer.content
    out, sent = image_of(answer), np.asarray(noise())
    assert (out[25:39, 25:39] == sent[25:39, 25:39]).all()  # > 8 from every black pixel
    assert (out[:8] != sent[:8]).any(axis=-1).mean() > 0.9


def test_a_data_url_is_taken_and_include_init_images_repeats_the_inputs(queue):
    image = "data:image/png;base64," + b64(noise())
    answer = img2img(init_images=[image], denoising_strength=0.5, include_init_images=True)
    assert answer.status_code == 200, answer.content
    assert answer.json()["parameters"]["init_images"] == [image]
    assert image_of(answer).shape == (SIZE, SIZE, 3)
    assert "Denoising strength: 0.5" in json.loads(answer.json()["info"])["infotexts"][0]


@pytest.mark.parametrize(("mode", "runs"), [(0, 0), (1, 1), (2, 2), (3, 0)])
def test_resize_mode_frames_the_input_as_a1111_does(queue, mode, runs):
    """A mask marking one pixel in the middle, unblurred: the rest of the answer is the
    framed input."""
    source = noise((128, 64), 7)
    answer = img2img(init_images=[b64(source)], mask=b64(middle_mark()), mask_blur=0,
                     width=64, height=64, resize_mode=mode, inpaint_full_res=False)  # fmt: skip
    assert answer.status_code == 200, answer.content
    check_framed(image_of(answer), source, runs)


def test_sides_are_rounded_down_to_8_within_the_bounds(queue):
    answer = img2img(init_images=[b64(noise((100, 75)))], width=71, height=30)
    assert answer.status_code == 200, answer.content
    assert image_of(answer).shape == (64, 64, 3)  # 71 -> 64; 30 -> 24 -> GEN_MIN_SIDE 64
    assert answer.json()["parameters"]["width"] == 64
    unsent = img2img(init_images=[b64(noise((100, 75)))])
    assert image_of(unsent).shape == (72, 96, 3)  # the input's, rounded down


def test_inpaint_full_res_works_the_masked_box_and_answers_the_images_size(queue):
    """A1111's default (inpaint_full_res, padding 0): the box of the square grown by twice
    mask_blur, worked at width x height, pasted back into the 128x128 picture."""
    source = noise((128, 128), 9)
    unet = queue.loader.pipeline(60).unet
    seen: list[tuple[int, ...]] = []
    hook = unet.register_forward_pre_hook(lambda _m, args: seen.append(tuple(args[0].shape[-2:])))
    try:
        answer = img2img(init_images=[b64(source)], denoising_strength=1, width=64, height=64,
                         mask=b64(square((56, 56, 72, 72), (128, 128))))  # fmt: skip
    finally:
        hook.remove()
    assert answer.status_code == 200, answer.content
    # 64x64 worked: the tiny VAE's latents are half each side; the whole 128x128's are 64
    assert set(seen) == {(32, 32)}
    out, sent = image_of(answer), np.asarray(source)
    assert out.shape == (128, 128, 3)
    outside = np.ones((128, 128), bool)
    outside[48:80, 48:80] = False  # the box: 56..72 grown by 8
    assert (out[outside] == sent[outside]).all()
    assert (out[56:72, 56:72] != sent[56:72, 56:72]).any(axis=-1).mean() > 0.9
    record = Client().get("/images").json()["items"][0]["parameters"]["edit"]
    assert record["only_masked"] == {"padding": 0, "box": [48, 48, 80, 80], "size": [64, 64]}


def test_png_info_reads_back_what_img2img_wrote(queue):
    answer = img2img(init_images=[b64(noise())], denoising_strength=0.5, cfg_scale=5)
    assert answer.status_code == 200, answer.content
    png = answer.json()["images"][0]
    read = Client().post("/sdapi/v1/png-info", {"image": png}, content_type="application/json")
    assert read.status_code == 200, read.content
    body = read.json()
    assert body["info"] == json.loads(answer.json()["info"])["infotexts"][0]
    parameters = body["parameters"]
    assert parameters["Prompt"] == "a red door" and parameters["Seed"] == "4"
    assert (parameters["Steps"], parameters["CFG scale"]) == ("2", "5")
    assert (parameters["Size-1"], parameters["Size-2"]) == ("64", "64")
    assert parameters["Denoising strength"] == "0.5"
    assert json.loads(body["items"]["imagegen"])["seed"] == 4


def test_png_info_reads_a1111s_own_text():
    info = PngImagePlugin.PngInfo()
    info.add_text(
        "parameters",
        "a cat\nin a hat\nNegative prompt: dogs\nSteps: 20, Sampler: DPM++ 2M, Schedule type: "
        'Karras, CFG scale: 7, Seed: 1234, Size: 512x768, Model: "sd, xl", Version: v1.10.1',
    )
    read = Client().post("/sdapi/v1/png-info", {"image": b64(noise(), info)},
                         content_type="application/json")  # fmt: skip
    assert read.status_code == 200, read.content
    assert read.json()["parameters"] == {
        "Prompt": "a cat\nin a hat", "Negative prompt": "dogs", "Steps": "20",
        "Sampler": "DPM++ 2M", "Schedule type": "Karras", "CFG scale": "7", "Seed": "1234",
        "Size-1": "512", "Size-2": "768", "Model": "sd, xl", "Version": "v1.10.1",
    }  # fmt: skip
    plain = Client().post("/sdapi/v1/png-info", {"image": b64(noise())},
                          content_type="application/json")  # fmt: skip
    assert plain.json() == {"info": "", "items": {}, "parameters": {}}


def test_png_info_of_a_megabyte_text_without_a_colon_answers_at_once():
    """A 1 MB `parameters` text compressed into a PNG of a few KB (zTXt): its parse stays
    linear and bounded (infotext.MAX_PARSED), so it cannot hold the process for hours."""
    info = PngImagePlugin.PngInfo()
    info.add_text("parameters", "a" * 1_000_000, zip=True)
    body = {"image": b64(Image.new("RGB", (8, 8)), info)}
    assert len(body["image"]) < 8_000
    started = time.monotonic()
    read = Client().post("/sdapi/v1/png-info", body, content_type="application/json")
    assert time.monotonic() - started < 1.0
    assert read.status_code == 200 and len(read.json()["info"]) == 1_000_000


@pytest.mark.parametrize(
    ("body", "field", "rule"),
    [
        ({"init_images": ["not base64!"]}, "init_images", "must be base64 text"),
        ({"init_images": [base64.b64encode(b"GIF89a no").decode()]}, "init_images",
         "must be a PNG, JPEG or WebP image"),
        ({"init_images": []}, "init_images", "at least 1 item"),
        ({"init_images": [b64(noise())] * 2}, "init_images", "at most 1 item"),
        ({"mask": "%%%"}, "mask", "must be base64 text"),
        ({"mask": b64(square(size=(72, 64)))}, "mask", "must be the image's size, 64x64"),
        ({"mask": b64(Image.new("L", (64, 64)))}, "mask", "marks nothing to repaint"),
        ({"mask": b64(Image.new("L", (64, 64), 255)), "inpainting_mask_invert": 1}, "mask",
         "marks nothing to repaint"),
        ({"denoising_strength": 0}, "denoising_strength", "greater than 0"),
        ({"denoising_strength": 1.5}, "denoising_strength", "less than or equal to 1"),
        ({"inpainting_fill": 4}, "inpainting_fill", "less than or equal to 3"),
    ],
)  # fmt: skip
def test_a_bad_img2img_is_a_400_naming_the_field_with_nothing_stored_or_queued(
    body, field, rule, tmp_path, monkeypatch
):
    from imagegen.generation.images import ImageStore

    monkeypatch.setattr(backend.current_backend(), "images", ImageStore(tmp_path))
    answer = img2img(**{"init_images": [b64(noise())], **body})
    assert answer.status_code == 400, answer.content
    details = {d["field"]: d["message"] for d in answer.json()["error"]["details"]}
    assert rule in details[field], details
    assert list(tmp_path.iterdir()) == []
    assert backend.current_backend().jobs.recent(1) == []


def test_png_info_of_what_is_not_an_image_is_a_400_naming_it():
    for sent, rule in (("@@", "must be base64 text"), ("AAAA", "must be a PNG, JPEG or WebP")):
        read = Client().post("/sdapi/v1/png-info", {"image": sent},
                             content_type="application/json")  # fmt: skip
        assert read.status_code == 400
        assert rule in read.json()["error"]["details"][0]["message"]
        assert read.json()["error"]["details"][0]["field"] == "image"


def test_every_inpainting_fill_runs_as_original(queue):
    """docs/protocols.md: 0, 2 and 3 are accepted and run as 1."""
    body = {"init_images": [b64(noise())], "mask": b64(square()), "denoising_strength": 0.6}
    made = {fill: img2img(**body, inpainting_fill=fill).json()["images"] for fill in range(4)}
    assert made[0] == made[1] == made[2] == made[3]
