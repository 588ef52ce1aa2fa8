"""The openai SDK's images.edit, unchanged, and a replay of Open WebUI's edit request, against
the app over HTTP (this process's, on a loopback port; a web replica in distributed mode):
the kept pixels, the repainted area, the size, the same bytes for the same seed, one image per
request, bad parts refused (and the next edit fine), an identical request joining its twin's
job, and LibreChat's JPEG/WebP answers. The rules in detail, in process:
tests/imagegen/api/test_openai_edits.py."""

import base64
import io
import re
import threading
import time
import uuid

import numpy as np
import openai
import pytest
import requests
from PIL import Image

from tests.imagegen.api.clients.conftest import TOKEN, cancel, jobs, start_blocker, wait_until
from tests.imagegen.api.clients.test_open_webui import URL_RESPONSE_MODELS, get_image_data
from tests.support.processes import AppServer

SIZE = 64
SQUARE = (24, 24, 40, 40)  # the mask's transparent square
REACH = 8  # twice mask_blur's default, 4
FAST = {"steps": 2, "guidance_scale": 0}


def client(app: AppServer) -> openai.OpenAI:
    return openai.OpenAI(base_url=app.url("/v1"), api_key=TOKEN, max_retries=0)


def encode(image: Image.Image, format: str = "PNG") -> bytes:
    buffer = io.BytesIO()
    image.save(buffer, format=format)
    return buffer.getvalue()


def noise(size: tuple[int, int] = (SIZE, SIZE), seed: int = 5) -> Image.Image:
    pixels = np.random.default_rng(seed).integers(0, 256, (size[1], size[0], 3), np.uint8)
    return Image.fromarray(pixels, "RGB")


def transparent_square_mask() -> bytes:
    mask = Image.new("RGBA", (SIZE, SIZE), (0, 0, 0, 255))
    mask.paste((0, 0, 0, 0), SQUARE)
    return encode(mask)


def far_from_square() -> np.ndarray:
    ys, xs = np.indices((SIZE, SIZE))
    left, top, right, bottom = SQUARE
    dx = np.maximum(np.maximum(left - xs, xs - (right - 1)), 0)
    dy = np.maximum(np.maximum(top - ys, ys - (bottom - 1)), 0)
    return dx * dx + dy * dy > REACH * REACH


def pixels(data: bytes) -> np.ndarray:
    return np.asarray(Image.open(io.BytesIO(data)).convert("RGB"))


def b64_images(result) -> list[bytes]:
    return [base64.b64decode(datum.b64_json) for datum in result.data]


@pytest.mark.both_modes
def test_sdk_edit_with_a_mask_repaints_only_the_transparent_square_and_repeats_its_bytes(app):
    def edit() -> bytes:
        result = client(app).images.edit(
            image=("in.png", encode(noise()), "image/png"),
            mask=("mask.png", transparent_square_mask(), "image/png"),
            prompt="sdk edit door", size="auto",
            extra_body={"seed": 4, "strength": 1, **FAST},
        )  # fmt: skip
        (png,) = b64_images(result)
        return png

    first = edit()
    got, sent = pixels(first), np.asarray(noise())
    assert got.shape == (SIZE, SIZE, 3)
    far = far_from_square()
    assert (got[far] == sent[far]).all()  # exactly the input's beyond 2 x mask_blur
    left, top, right, bottom = SQUARE
    assert (got[top:bottom, left:right] != sent[top:bottom, left:right]).any(axis=-1).mean() > 0.9
    assert edit() == first  # the same seed and inputs: the same bytes
    found = jobs(app, "sdk edit door")
    assert len(found) == 2 and all(job["state"] == "succeeded" for job in found)
    assert found[0]["parameters"]["edit"]["mask"] is not None


def test_sdk_edit_of_a_list_of_one_image_without_a_mask_is_img2img_at_the_inputs_size(app):
    """`image=[...]` is what the SDK sends as `image[]` parts, as Open WebUI does for a list."""
    source = noise((100, 75))
    result = client(app).images.edit(
        image=[("in.png", encode(source), "image/png")], prompt="sdk edit list",
        extra_body={"seed": 7, "strength": 0.5, **FAST},
    )  # fmt: skip
    (png,) = b64_images(result)
    assert Image.open(io.BytesIO(png)).size == (96, 72)  # rounded down to 8
    resized = np.asarray(source.resize((96, 72), Image.Resampling.LANCZOS))
    assert (pixels(png) != resized).any(axis=-1).mean() > 0.9  # the whole picture
    (job,) = jobs(app, "sdk edit list")
    assert job["parameters"]["edit"]["mask"] is None
    assert job["parameters"]["edit"]["strength"] == 0.5


def open_webui_edit(app: AppServer, model: str, image: str | list[str], prompt: str) -> list:
    """image_edits for engine openai (backend/open_webui/routers/images.py): the image(s) as
    data URLs turned into file parts (`image`, or `image[]` for a list), the fields as
    strings, b64_json asked for unless the model matches IMAGE_URL_RESPONSE_MODELS."""
    headers = {"Authorization": f"Bearer {TOKEN}"}
    data = {"model": model, "prompt": prompt, "n": 1, "size": f"{SIZE}x{SIZE}",
            **({} if re.match(URL_RESPONSE_MODELS, model)
               else {"response_format": "b64_json"})}  # fmt: skip

    def file_item(data_url: str, name: str):
        header, encoded = data_url.split(",", 1)
        mime = header.split(";")[0].removeprefix("data:") or "image/png"
        extension = {"image/jpeg": ".jpg", "image/png": ".png"}[mime]
        return (name, (f"{uuid.uuid4()}{extension}", io.BytesIO(base64.b64decode(encoded)), mime))

    if isinstance(image, str):
        files = [file_item(image, "image")]
    else:
        files = [file_item(one, "image[]") for one in image]
    fields = {key: str(value) for key, value in data.items()}
    r = requests.post(f"{app.url('/v1')}/images/edits", data=fields, files=files, headers=headers)
    r.raise_for_status()
    return [get_image_data(datum["b64_json"]) for datum in r.json()["data"]]


def data_url(image: Image.Image, format: str) -> str:
    return f"data:image/{format.lower()};base64,{base64.b64encode(encode(image, format)).decode()}"


@pytest.mark.parametrize("model", ["dall-e-2", "gpt-image-1"])
def test_open_webui_edit_replay_of_one_jpeg_and_of_a_list(app, model):
    source = noise()
    for image in (data_url(source, "JPEG"), [data_url(source, "PNG")]):
        ((png, content_type),) = open_webui_edit(app, model, image, f"owui edit {model}")
        assert content_type == "image/png"
        assert Image.open(io.BytesIO(png)).size == (SIZE, SIZE)
        assert (pixels(png) != np.asarray(source)).any(axis=-1).mean() > 0.5
    found = jobs(app, f"owui edit {model}")
    assert len(found) == 2
    for job in found:  # no mask, the default strength: img2img of the whole picture
        assert (job["parameters"]["edit"]["mask"], job["parameters"]["edit"]["strength"]) == (
            None, 0.75
        )  # fmt: skip


def test_each_bad_part_is_a_400_naming_it_and_the_next_edit_succeeds(app):
    good = ("in.png", encode(noise()), "image/png")
    bad = [
        ({"image": ("in.png", b"not an image", "image/png")}, "image"),
        ({"image": ("in.png", encode(noise())[:300], "image/png")}, "image"),
        ({"image": [good, good]}, "image"),
        ({"mask": ("m.png", encode(Image.new("RGBA", (72, 64))), "image/png")}, "mask"),
        ({"mask": ("m.png", encode(Image.new("L", (SIZE, SIZE))), "image/png")}, "mask"),
        ({"extra_body": {"strength": 0}}, "strength"),
        ({"extra_body": {"strength": 1.5}}, "strength"),
    ]
    for fields, param in bad:
        sent = {"image": good, "prompt": "sdk edit refused", **fields}
        with pytest.raises(openai.BadRequestError) as refused:
            client(app).images.edit(**sent)
        assert (refused.value.status_code, refused.value.param) == (400, param), fields
    assert jobs(app, "sdk edit refused") == []
    result = client(app).images.edit(image=good, prompt="sdk edit after", extra_body=FAST)
    assert Image.open(io.BytesIO(b64_images(result)[0])).size == (SIZE, SIZE)


@pytest.mark.both_modes
def test_an_identical_edit_while_queued_joins_its_twins_job_and_another_image_does_not(app):
    blocker = start_blocker(app)
    answers: dict[int, requests.Response] = {}

    def post(index: int, image: bytes) -> threading.Thread:
        def send() -> None:
            answers[index] = requests.post(
                app.url("/v1/images/edits"),
                data={"prompt": "edit twins", "steps": "2", "seed": "3"},
                files={"image": ("in.png", image, "image/png")},
                headers={"Authorization": f"Bearer {TOKEN}"},
            )

        thread = threading.Thread(target=send)
        thread.start()
        return thread

    calls = [post(0, encode(noise()))]
    wait_until(lambda: len(jobs(app, "edit twins")) == 1)
    calls.append(post(1, encode(noise())))
    time.sleep(0.5)  # the twin reaches the service, which has the job queued still
    assert len(jobs(app, "edit twins")) == 1
    calls.append(post(2, encode(noise(seed=6))))  # the same fields, another picture
    wait_until(lambda: len(jobs(app, "edit twins")) == 2)
    cancel(app, blocker)
    for call in calls:
        call.join(60)
    assert [answers[index].status_code for index in range(3)] == [200, 200, 200]
    assert answers[0].json()["data"] == answers[1].json()["data"] != answers[2].json()["data"]


@pytest.mark.parametrize("output_format", ["jpeg", "webp"])
def test_librechat_asks_for_jpeg_or_webp_with_a_compression_and_gets_it(app, output_format):
    result = client(app).images.generate(
        prompt="sdk compressed", size="64x64", output_format=output_format,
        output_compression=80, extra_body=FAST,
    )  # fmt: skip
    (image,) = b64_images(result)
    assert Image.open(io.BytesIO(image)).format == output_format.upper()


@pytest.mark.both_modes
def test_a_streamed_edit_sends_image_edit_events_to_its_completed_one(app):
    stream = client(app).images.edit(
        image=("in.png", encode(noise()), "image/png"),
        mask=("mask.png", transparent_square_mask(), "image/png"),
        prompt="sdk streamed edit", size="auto", stream=True, partial_images=1,
        extra_body={"seed": 4, "strength": 1, "steps": 4, "guidance_scale": 0},
    )  # fmt: skip
    events = list(stream)
    assert [event.type for event in events] == ["image_edit.partial_image", "image_edit.completed"]
    assert events[0].partial_image_index == 0
    png = base64.b64decode(events[1].b64_json)
    assert Image.open(io.BytesIO(png)).size == (SIZE, SIZE) and events[1].size == f"{SIZE}x{SIZE}"
    (job,) = jobs(app, "sdk streamed edit")
    assert job["state"] == "succeeded" and job["parameters"]["edit"]["mask"] is not None
