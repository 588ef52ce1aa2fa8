"""OpenAI's images.edit (POST /v1/images/edits) and output formats, in process through Django's
whole stack on the real tiny pipeline: OpenAI's mask (transparent repaints) read as the
service's own, the kept pixels, the sizes, every bad part or field refused with nothing
written or queued, and JPEG/WebP answers while the store keeps the PNG. The openai SDK and
Open WebUI against the app under gunicorn: tests/imagegen/api/clients/test_openai_edits.py."""

import base64
import hashlib
import io
import json
from pathlib import Path

import numpy as np
import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.test import Client, RequestFactory
from PIL import Image
from redis.exceptions import ConnectionError as RedisConnectionError

from imagegen import backend
from imagegen.api.errors import MAY_HAVE_QUEUED, on_job_store_error
from imagegen.generation.edit_inputs import MARKS_NOTHING
from imagegen.generation.images import ImageStore
from imagegen.generation.jobs import JobQueue
from tests.imagegen.api.test_generate_form import bomb
from tests.support.loaders import ready_loader, serve

SIZE = 64
SQUARE = (24, 24, 40, 40)  # the mask's transparent square
REACH = 8  # twice mask_blur's default, 4


@pytest.fixture
def queue(hub, share: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> JobQueue:
    loader = ready_loader(hub, share, tmp_path / "cache")
    return serve(loader, tmp_path / "images", monkeypatch)


def encode(image: Image.Image, format: str = "PNG") -> bytes:
    buffer = io.BytesIO()
    image.save(buffer, format=format)
    return buffer.getvalue()


def source_image(size: tuple[int, int] = (SIZE, SIZE), mode: str = "RGB") -> Image.Image:
    """Noise: every pixel its own, so a changed one shows."""
    channels = len(mode)
    pixels = np.random.default_rng(5).integers(0, 256, (size[1], size[0], channels), np.uint8)
    if mode == "RGBA":
        pixels[..., 3] = 255
    return Image.fromarray(pixels, mode)


def openai_mask(size: tuple[int, int] = (SIZE, SIZE), mode: str = "RGBA") -> Image.Image:
    """OpenAI's mask: opaque (kept) everywhere but the transparent SQUARE (repainted). Its
    colours are noise: only the alpha channel counts."""
    mask = source_image(size, "RGBA")
    if mode == "RGBA":
        mask.paste((0, 0, 0, 0), SQUARE)
        return mask
    return mask.convert(mode)


def part(data: bytes, name: str = "in.png") -> SimpleUploadedFile:
    return SimpleUploadedFile(name, data, "image/png")


def post_edit(client: Client, *, mask: bool = True, **fields):
    parts = {"image": part(encode(source_image()))}
    if mask:
        parts["mask"] = part(encode(openai_mask()), "mask.png")
    body = {"prompt": "a red door", "seed": "4", "steps": "2", **parts, **fields}
    return client.post("/v1/images/edits", body)


def images(answer) -> list[bytes]:
    assert answer.status_code == 200, answer.content
    return [base64.b64decode(datum["b64_json"]) for datum in answer.json()["data"]]


def pixels(data: bytes) -> np.ndarray:
    return np.asarray(Image.open(io.BytesIO(data)).convert("RGB"))


def far_from_square() -> np.ndarray:
    ys, xs = np.indices((SIZE, SIZE))
    left, top, right, bottom = SQUARE
    dx = np.maximum(np.maximum(left - xs, xs - (right - 1)), 0)
    dy = np.maximum(np.maximum(top - ys, ys - (bottom - 1)), 0)
    return dx * dx + dy * dy > REACH * REACH


def test_a_transparent_square_is_repainted_and_every_pixel_beyond_its_edge_kept(queue):
    (out,) = images(post_edit(Client(), strength="1"))
    got, sent = pixels(out), np.asarray(source_image())
    assert got.shape == (SIZE, SIZE, 3)
    far = far_from_square()
    assert (got[far] == sent[far]).all()  # exactly the input's
    left, top, right, bottom = SQUARE
    inside = (got[top:bottom, left:right] != sent[top:bottom, left:right]).any(axis=-1)
    assert inside.mean() > 0.9


@pytest.mark.parametrize("format", ["PNG", "WEBP"])
def test_the_mask_is_stored_as_the_service_reads_it_and_generate_remakes_the_image(queue, format):
    """The record's mask is white where OpenAI's was transparent (any format with alpha),
    so POST /generate with the image as sent and that mask makes the same bytes."""
    client = Client()
    buffer = io.BytesIO()
    openai_mask().save(buffer, format=format, lossless=True)
    parts = {"image": part(encode(source_image())), "mask": part(buffer.getvalue(), "m.img")}
    fields = {"prompt": "a red door", "seed": "4", "steps": "2"}
    (edited,) = images(client.post("/v1/images/edits", {**fields, **parts}))
    record = client.get(f"/images/{image_id(queue)}").json()["parameters"]["edit"]
    stored = b"".join(client.get(record["mask"]["url"]).streaming_content)
    expected = np.zeros((SIZE, SIZE), np.uint8)
    left, top, right, bottom = SQUARE
    expected[top:bottom, left:right] = 255
    assert (np.asarray(Image.open(io.BytesIO(stored))) == expected).all()
    digest = hashlib.sha256(encode(source_image())).hexdigest()
    assert record["source"]["sha256"] == digest  # the image as sent
    parts = {"image": part(encode(source_image())), "mask": part(stored)}
    remade = client.post("/generate", {**fields, **parts})
    assert remade.status_code == 200, remade.content
    assert remade.content == edited


def image_id(queue: JobQueue) -> str:
    job = queue.recent(1)[0]
    assert job.image is not None
    return job.image.id


def test_half_transparent_pixels_blend(queue):
    """A pixel of alpha a is repainted by (255 - a) / 255; a mask of alpha 255 everywhere
    marks nothing: a 400 (the answer would be the image as sent), nothing queued."""
    mask = source_image(mode="RGBA")
    mask.putalpha(128)
    parts = {"image": part(encode(source_image())), "mask": part(encode(mask))}
    answer = Client().post("/v1/images/edits", {"prompt": "p", "steps": "2", **parts})
    changed = (pixels(images(answer)[0]) != np.asarray(source_image())).any(axis=-1)
    assert changed.mean() > 0.5
    parts = {"image": part(encode(source_image())), "mask": part(encode(source_image(mode="RGBA")))}
    jobs_before = len(queue.recent(100))
    answer = Client().post("/v1/images/edits", {"prompt": "p", "steps": "2", **parts})
    assert answer.status_code == 400, answer.content
    assert answer.json()["error"]["param"] == "mask"
    assert MARKS_NOTHING in answer.json()["error"]["message"]
    assert len(queue.recent(100)) == jobs_before


def test_without_a_mask_the_whole_picture_is_img2img_even_where_the_image_is_transparent(queue):
    image = source_image(mode="RGBA")
    image.paste((0, 0, 0, 0), SQUARE)  # transparent: not a mask, its alpha is dropped
    parts = {"image": part(encode(image))}
    answer = Client().post("/v1/images/edits", {"prompt": "p", "steps": "2", **parts})
    (out,) = images(answer)
    changed = (pixels(out) != np.asarray(image.convert("RGB"))).any(axis=-1)
    assert changed[far_from_square()].mean() > 0.9  # the opaque area too
    record = queue.recent(1)[0].image
    assert record is not None and record.parameters.edit is not None
    assert record.parameters.edit.mask is None


def test_image_brackets_is_taken_as_image_and_the_same_seed_gives_the_same_bytes(queue):
    client = Client()
    first = images(post_edit(client, mask=False))
    sent = {"prompt": "a red door", "seed": "4", "steps": "2"}
    second = client.post("/v1/images/edits", {**sent, "image[]": part(encode(source_image()))})
    assert images(second) == first
    assert images(post_edit(client, mask=False, seed="5")) != first


def test_size_auto_is_the_inputs_rounded_down_to_8_and_a_size_sent_is_made(queue):
    client = Client()
    parts = {"image": part(encode(source_image((100, 75))))}
    (auto,) = images(client.post("/v1/images/edits", {"prompt": "p", "steps": "2",
                                                      "size": "auto", **parts}))  # fmt: skip
    assert Image.open(io.BytesIO(auto)).size == (96, 72)
    parts = {"image": part(encode(source_image((100, 75))))}
    (sized,) = images(client.post("/v1/images/edits", {"prompt": "p", "steps": "2",
                                                       "size": "64x80", **parts}))  # fmt: skip
    assert Image.open(io.BytesIO(sized)).size == (64, 80)


def test_n_edits_are_n_jobs_with_consecutive_seeds_and_unknown_fields_are_ignored(queue):
    extras = {"quality": "high", "background": "auto", "input_fidelity": "high", "user": "u",
              "moderation": "low", "partial_images": "0", "model": "gpt-image-1"}  # fmt: skip
    answer = post_edit(Client(), n="2", seed="9", **extras)
    assert len(images(answer)) == 2
    seeds = sorted(job.parameters.seed for job in queue.recent(2))
    assert seeds == [9, 10]


def truncated() -> bytes:
    return encode(source_image())[:200]


@pytest.mark.parametrize(
    ("parts", "fields", "field", "rule"),
    [
        ({"image": b"not an image"}, {}, "image", "must be a PNG, JPEG or WebP image"),
        ({"image": truncated()}, {}, "image", "must be a PNG, JPEG or WebP image"),
        ({"image": bomb(30_000)}, {}, "image", "declares more pixels than Pillow decodes"),
        ({"image": bomb(5_000)}, {}, "image", "declares 5000x5000 pixels, past the bound"),
        ({"mask": bomb(5_000)}, {}, "mask", "declares 5000x5000 pixels, past the bound"),
        ({}, {}, "image", "is required"),
        ({}, {"image": "https://example.org/in.png"}, "image", "must be a file part"),
        ({"image": b"x", "image[]": b"y"}, {}, "image", "only one image is supported"),
        ({"mask": b"not an image"}, {}, "mask", "must be a PNG, JPEG or WebP image"),
        ({"mask": encode(openai_mask((72, 64)))}, {}, "mask",
         "must be the image's size, 64x64; got 72x64"),
        ({"mask": encode(openai_mask(mode="RGB"))}, {}, "mask", "must have an alpha channel"),
        ({"mask": encode(openai_mask(mode="L"))}, {}, "mask", "must have an alpha channel"),
        ({}, {"strength": "0"}, "strength", "greater than 0"),
        ({}, {"strength": "1.5"}, "strength", "less than or equal to 1"),
        ({}, {"mask_blur": "65"}, "mask_blur", "less than or equal to 64"),
        ({}, {"n": "0"}, "n", "greater than or equal to 1"),
        ({}, {"size": "65x64"}, "size", "multiples of 8"),
        ({}, {"output_format": "gif"}, "output_format", "'png', 'jpeg' or 'webp'"),
        ({}, {"output_compression": "101"}, "output_compression", "less than or equal to 100"),
        ({}, {"response_format": "jpeg"}, "response_format", "'b64_json' or 'url'"),
        ({}, {"prompt": " "}, "prompt", ""),
    ],
)  # fmt: skip
def test_a_bad_edit_is_a_400_naming_field_and_rule_with_nothing_written(
    parts, fields, field, rule, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    monkeypatch.setattr(backend.current_backend(), "images", ImageStore(tmp_path))
    sent = {"image": encode(source_image()), **parts} if field != "image" else parts
    files = {name: part(data) for name, data in sent.items()}
    response = Client().post("/v1/images/edits", {"prompt": "fine", **fields, **files})
    assert response.status_code == 400, response.content
    error = response.json()["error"]
    assert (error["type"], error["param"]) == ("invalid_request_error", field)
    assert rule in error["message"]
    assert list(tmp_path.iterdir()) == []  # no input stored
    assert backend.current_backend().jobs.recent(1) == []  # nothing queued


@pytest.mark.parametrize("format", ["jpeg", "webp"])
def test_jpeg_and_webp_answers_at_the_compression_asked_while_the_store_keeps_the_png(
    queue, format
):
    client = Client()
    body = {"prompt": "a lighthouse", "size": "64x64", "steps": 2, "seed": 3}
    sizes = []
    for compression in (10, 95):
        answer = client.post(
            "/v1/images/generations",
            {**body, "output_format": format, "output_compression": compression},
            content_type="application/json",
        )
        (data,) = images(answer)
        assert Image.open(io.BytesIO(data)).format == format.upper()
        sizes.append(len(data))
    assert sizes[0] < sizes[1]  # the number is the quality: lower is smaller
    stored = client.get(f"/images/{image_id(queue)}.png")
    assert Image.open(io.BytesIO(b"".join(stored.streaming_content))).format == "PNG"
    (edited,) = images(post_edit(client, output_format=format, output_compression="50"))
    assert Image.open(io.BytesIO(edited)).format == format.upper()


def test_png_is_the_default_and_a_link_serves_the_format_asked(queue):
    client = Client()
    body = {"prompt": "a lighthouse", "size": "64x64", "steps": 2}
    (plain,) = images(client.post("/v1/images/generations", body, content_type="application/json"))
    assert plain == b"".join(client.get(f"/images/{image_id(queue)}.png").streaming_content)
    png_body = {**body, "output_format": "png", "output_compression": 10}
    kind = "application/json"
    (same,) = images(client.post("/v1/images/generations", png_body, content_type=kind))
    assert same == b"".join(client.get(f"/images/{image_id(queue)}.png").streaming_content)
    linked = client.post(
        "/v1/images/generations",
        {**body, "response_format": "url", "output_format": "webp", "output_compression": 70},
        content_type="application/json",
    )
    assert linked.status_code == 200, linked.content
    url = linked.json()["data"][0]["url"]
    assert "output_format=webp" in url and "output_compression=70" in url
    fetched = client.get(url.removeprefix("http://testserver"))
    assert fetched.status_code == 200 and fetched["Content-Type"] == "image/webp"
    assert Image.open(io.BytesIO(fetched.content)).format == "WEBP"
    # The signature covers the format and quality: the link asks for this encoding only.
    path = url.removeprefix("http://testserver")
    for changed in (
        path.replace("output_compression=70", "output_compression=10"),
        path.replace("output_format=webp", "output_format=jpeg"),
        path.replace("&output_compression=70", ""),
        path.split("&output_format")[0],
    ):
        assert changed != path
        assert client.get(changed).status_code == 403, changed


@pytest.mark.parametrize("path", ["/v1/images/edits", "/sdapi/v1/img2img"])
def test_an_edit_cut_off_by_a_job_store_outage_says_its_job_may_have_been_queued(path):
    """As for generations (docs/distributed.md): its retry with the same Idempotency-Key
    joins that job, on OpenAI's edits and A1111's img2img alike."""
    request = RequestFactory().post(path)
    answer = json.loads(on_job_store_error(request, RedisConnectionError("down")).content)
    assert MAY_HAVE_QUEUED in json.dumps(answer)
