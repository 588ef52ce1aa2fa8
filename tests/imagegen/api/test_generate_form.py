"""POST /generate's form rules, in-process through Django's whole stack (middleware, Ninja,
the exception handlers): every refused field is a 400 naming the field and the rule, and
nothing is queued."""

import io
import zlib
from pathlib import Path

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.test import Client
from PIL import Image

from imagegen import backend
from imagegen.api.schemas import GenerateForm
from imagegen.generation.images import ImageStore
from imagegen.generation.schedulers import A1111_NAMES, NAMES


@pytest.mark.parametrize(
    ("fields", "field", "rule"),
    [
        ({}, "prompt", "required"),
        ({"prompt": ""}, "prompt", "at least 1"),
        ({"prompt": "   "}, "prompt", "visible character"),
        ({"prompt": "\u00a0\u2003"}, "prompt", "visible character"),  # NBSP, em space
        ({"prompt": "\u200b\u200d\ufeff"}, "prompt", "visible character"),  # zero-width
        ({"prompt": "\u0301\u0308"}, "prompt", "visible character"),  # combining marks alone
        ({"prompt": "p" * 1001}, "prompt", "at most 1000"),
        ({"negative_prompt": "n" * 1001}, "negative_prompt", "at most 1000"),
        ({"steps": "0"}, "steps", "greater than or equal to 1"),
        ({"steps": "101"}, "steps", "less than or equal to 100"),
        ({"steps": "2.5"}, "steps", "valid integer"),
        ({"steps": "\uff12\uff10"}, "steps", "valid integer"),  # full-width digits
        ({"steps": "2_0"}, "steps", "valid integer"),
        ({"seed": "\u0661\u0662"}, "seed", "valid integer"),  # Arabic-Indic digits
        ({"guidance": "-0.1"}, "guidance", "greater than or equal to 0"),
        ({"guidance": "30.5"}, "guidance", "less than or equal to 30"),
        ({"guidance": "nan"}, "guidance", "finite number"),
        ({"guidance": "inf"}, "guidance", "finite number"),
        ({"guidance": "1_0"}, "guidance", "valid number"),
        ({"guidance": "\uff15"}, "guidance", "valid number"),
        ({"guidance": "lots"}, "guidance", "valid number"),
        ({"size": "64"}, "size", "WIDTHxHEIGHT"),
        ({"size": "\uff16\uff14x\uff16\uff14"}, "size", "WIDTHxHEIGHT"),
        ({"size": "60x64"}, "size", "multiples of 8"),
        ({"size": "56x64"}, "size", "between 64 and 2048"),
        ({"size": "64x4096"}, "size", "between 64 and 2048"),
        ({"seed": "-1"}, "seed", "greater than or equal to 0"),
        ({"seed": str(2**32)}, "seed", "less than or equal to 4294967295"),
        ({"force_cpu": "maybe"}, "force_cpu", "valid boolean"),
        (
            {"scheduler": "Euler ancestral"},
            "scheduler",
            "unknown scheduler 'Euler ancestral'; valid: euler, ",
        ),
        ({"scheduler": "PNDM"}, "scheduler", "unknown scheduler 'PNDM'; valid: "),
        ({"stpes": "3"}, "stpes", "not a field"),
    ],
)
def test_each_bad_field_is_a_400_naming_field_and_rule(fields, field, rule):
    data = {"prompt": "fine", **fields} if "prompt" not in fields and fields != {} else fields
    response = Client().post("/generate", data)
    assert response.status_code == 400, response.content
    details = {d["field"]: d["message"] for d in response.json()["error"]["details"]}
    assert rule in details[field]
    assert field in response.json()["error"]["message"]
    assert backend.current_backend().jobs.recent(1) == []  # refused before anything was queued


def test_several_bad_fields_are_each_named():
    response = Client().post("/generate", {"prompt": " ", "steps": "0", "size": "1x1"})
    assert response.status_code == 400
    fields = [d["field"] for d in response.json()["error"]["details"]]
    assert fields == ["prompt", "steps", "size"]


def test_a_file_part_is_refused_naming_it():
    upload = SimpleUploadedFile("prompt.txt", b"a cat")
    response = Client().post("/generate", {"prompt": "fine", "extra": upload})
    assert response.status_code == 400
    assert response.json()["error"]["details"] == [
        {
            "field": "extra",
            "message": "is a file; this form takes text fields, and the file parts `image` "
            "and `mask`",
        }
    ]


def test_a_prompt_with_a_visible_character_among_invisible_ones_is_fine():
    form = GenerateForm.model_validate({"prompt": "\u200ba\u0301", "steps": " 3 "})
    assert form.prompt == "\u200ba\u0301" and form.steps == 3


def test_an_unknown_scheduler_is_a_400_listing_every_valid_name():
    response = Client().post("/generate", {"prompt": "fine", "scheduler": "dpm++"})
    assert response.status_code == 400
    assert response.json()["error"]["details"] == [
        {
            "field": "scheduler",
            "message": f"unknown scheduler 'dpm++'; valid: {', '.join(NAMES)}, "
            f"or A1111's name for one: {', '.join(A1111_NAMES)}",
        }
    ]


def test_a_scheduler_name_reaches_the_request_and_blank_means_the_default():
    assert (
        GenerateForm.model_validate({"prompt": "a", "scheduler": " lcm "}).to_request().scheduler
        == "lcm"
    )
    assert (
        GenerateForm.model_validate({"prompt": "a", "scheduler": " "}).to_request().scheduler
        is None
    )


def png(size: tuple[int, int], mode: str = "RGB") -> bytes:
    buffer = io.BytesIO()
    Image.new(mode, size).save(buffer, format="PNG")
    return buffer.getvalue()


def corner_mark(size: tuple[int, int]) -> bytes:
    """A mask marking only its top left pixel: a crop to the middle cuts it away."""
    image = Image.new("L", size)
    image.putpixel((0, 0), 255)
    buffer = io.BytesIO()
    image.save(buffer, format="PNG")
    return buffer.getvalue()


def upload(data: bytes, name: str = "in.png") -> SimpleUploadedFile:
    return SimpleUploadedFile(name, data, "image/png")


def saved(image_format: str, mode: str = "RGB") -> bytes:
    """A whole 64x64 image in `image_format` (white: a mask in it marks everything)."""
    buffer = io.BytesIO()
    Image.new(mode, (64, 64), "white").save(buffer, format=image_format)
    return buffer.getvalue()


def bomb(side: int) -> bytes:
    """A PNG whose header declares side x side pixels; its data is a few bytes."""
    data = bytearray(png((1, 1)))
    data[16:24] = side.to_bytes(4, "big") * 2  # IHDR's width and height
    data[29:33] = zlib.crc32(data[12:29]).to_bytes(4, "big")  # and its checksum
    return bytes(data)


@pytest.mark.parametrize(
    ("parts", "fields", "field", "rule"),
    [
        ({"image": b"not an image"}, {}, "image", "must be a PNG, JPEG or WebP image"),
        ({"image": png((64, 64))[:70]}, {}, "image", "must be a PNG, JPEG or WebP image"),
        ({"image": bomb(30_000)}, {}, "image", "declares more pixels than Pillow decodes, "
         "past the bound of 16777216 pixels"),
        ({"image": bomb(5_000)}, {}, "image", "declares 5000x5000 pixels, past the bound of "
         "16777216 pixels (4 x GEN_MAX_SIDE squared)"),
        ({"image": png((64, 64)), "mask": b"GIF8"}, {}, "mask", "must be a PNG, JPEG or WebP"),
        ({"image": saved("GIF")}, {}, "image", "must be a PNG, JPEG or WebP image"),
        ({"image": saved("BMP")}, {}, "image", "must be a PNG, JPEG or WebP image"),
        ({"image": saved("TIFF")}, {}, "image", "must be a PNG, JPEG or WebP image"),
        ({"image": png((64, 64)), "mask": saved("GIF", "L")}, {}, "mask",
         "must be a PNG, JPEG or WebP image"),
        ({"image": png((64, 64)), "mask": png((72, 64), "L")}, {}, "mask",
         "must be the image's size, 64x64; got 72x64"),
        ({"mask": png((64, 64), "L")}, {}, "mask", "needs an `image` file part"),
        ({"image": png((64, 64)), "mask": png((64, 64), "L")}, {}, "mask",
         "marks nothing to repaint (no pixel but black"),
        ({"image": png((128, 64)), "mask": corner_mark((128, 64))},
         {"size": "64x64", "resize_mode": "1"}, "mask",
         "once brought to 64x64 (resize_mode 1), marks nothing to repaint"),
        ({"image": png((64, 64))}, {"strength": "0"}, "strength", "greater than 0"),
        ({"image": png((64, 64))}, {"strength": "1.5"}, "strength", "less than or equal to 1"),
        ({"image": png((64, 64))}, {"strength": "nan"}, "strength", "finite number"),
        ({"image": png((64, 64))}, {"mask_blur": "65"}, "mask_blur", "less than or equal to 64"),
        ({}, {"strength": "0.5"}, "strength", "applies to an edit only: send an `image`"),
        ({}, {"mask_blur": "4"}, "mask_blur", "applies to an edit only"),
        ({}, {"resize_mode": "1"}, "resize_mode", "applies to an edit only"),
        ({"image": png((64, 64))}, {"only_masked": "true"}, "only_masked",
         "applies to an inpainting only: send a `mask`"),
        ({"image": png((64, 64))}, {"only_masked_padding": "8"}, "only_masked_padding",
         "applies with only_masked=true only"),
        ({"image": png((64, 64)), "mask": png((64, 64), "L")},
         {"only_masked": "true", "only_masked_padding": "300"}, "only_masked_padding",
         "less than or equal to 256"),
        ({}, {"image": "in.png"}, "image", "must be a file part"),
    ],
)  # fmt: skip
def test_a_bad_edit_is_a_400_naming_field_and_rule_with_nothing_written(
    parts, fields, field, rule, settings, tmp_path: Path, monkeypatch
):
    monkeypatch.setattr(backend.current_backend(), "images", ImageStore(tmp_path))
    files = {name: upload(data) for name, data in parts.items()}
    response = Client().post("/generate", {"prompt": "fine", **fields, **files})
    assert response.status_code == 400, response.content
    details = {d["field"]: d["message"] for d in response.json()["error"]["details"]}
    assert rule in details[field], details
    assert list(tmp_path.iterdir()) == []  # no input stored
    assert backend.current_backend().jobs.recent(1) == []  # nothing queued


def test_two_images_are_refused_naming_the_part():
    response = Client().post(
        "/generate", {"prompt": "fine", "image": [upload(png((8, 8))), upload(png((8, 8)))]}
    )
    assert response.status_code == 400
    assert response.json()["error"]["details"] == [
        {"field": "image", "message": "only one file part of this name"}
    ]
