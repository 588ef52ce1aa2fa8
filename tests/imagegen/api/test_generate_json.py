"""POST /generate with a JSON body, in process through Django's whole stack on the real tiny
pipeline: the same fields and rules as the form, the same answers (the same PNG bytes for the
same seed, an edit's images as base64), and every bad field a 400 naming it, nothing queued."""

import base64
import contextlib
import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.test import Client

from imagegen.generation.jobs import JobFinished, JobQueue
from imagegen.model.loader import ModelLoader
from tests.imagegen.generation.test_edits import mask_image, png, source_image
from tests.support.loaders import pulled_loader, serve

FIELDS = {"prompt": "a lighthouse", "steps": 2, "guidance": 5.5, "size": "64x72", "seed": 7}


@pytest.fixture(scope="module")
def loader(hub_root: Path, tmp_path_factory: pytest.TempPathFactory) -> ModelLoader:
    return pulled_loader(hub_root, tmp_path_factory.mktemp("generate-json"))


@pytest.fixture
def queue(loader, tmp_path, monkeypatch) -> Iterator[JobQueue]:
    jobs = serve(loader, tmp_path / "images", monkeypatch)
    yield jobs
    for job in jobs.unfinished():
        with contextlib.suppress(JobFinished):
            jobs.cancel(job.id)
        jobs.wait(job.id, 60)


def post_json(body, query: str = ""):
    return Client().post("/generate" + query, body, content_type="application/json")


def as_form(fields: dict) -> dict[str, str]:
    return {name: str(value) for name, value in fields.items()}


def test_json_and_form_give_the_same_png_and_headers(queue):
    by_json = post_json(FIELDS)
    by_form = Client().post("/generate", as_form(FIELDS))
    assert by_json.status_code == 200, by_json.content
    assert by_form.status_code == 200, by_form.content
    assert by_json.content == by_form.content
    for header in ("X-Seed", "X-Steps", "X-Guidance", "X-Scheduler", "X-Size"):
        assert by_json[header] == by_form[header], header
    assert by_json["X-Size"] == "64x72"


def test_async_true_in_json_answers_the_job(queue):
    response = post_json({**FIELDS, "async": True})
    assert response.status_code == 202, response.content
    job = response.json()
    assert response["Location"] == f"/jobs/{job['id']}"
    assert job["parameters"]["seed"] == 7
    assert queue.wait(job["id"], 60).state == "succeeded"


def test_async_in_the_query_with_a_json_body(queue):
    response = post_json(FIELDS, "?async=true")
    assert response.status_code == 202, response.content


def test_an_inpainting_in_json_takes_base64_and_gives_the_forms_png(queue):
    image, mask = png(source_image()), png(mask_image())
    fields = {"prompt": "a red door", "seed": 4, "strength": 0.6}
    by_json = post_json(
        {
            **fields,
            "image": base64.b64encode(image).decode(),
            "mask": "data:image/png;base64," + base64.b64encode(mask).decode(),
        }
    )
    parts = {
        "image": SimpleUploadedFile("in.png", image, "image/png"),
        "mask": SimpleUploadedFile("mask.png", mask, "image/png"),
    }
    by_form = Client().post("/generate", {**as_form(fields), **parts})
    assert by_json.status_code == 200, by_json.content
    assert by_json.content == by_form.content
    assert by_json["X-Strength"] == "0.6"


@pytest.mark.parametrize(
    ("body", "field", "rule"),
    [
        ({}, "prompt", "Field required"),
        ({"prompt": "   "}, "prompt", "visible character"),
        ({"prompt": 5}, "prompt", "valid string"),
        ({"steps": 0}, "steps", "greater than or equal to 1"),
        ({"steps": True}, "steps", "valid integer"),  # not read as 1
        ({"steps": "4"}, "steps", "valid integer"),  # JSON numbers are numbers
        ({"steps": 2.5}, "steps", "valid integer"),
        ({"guidance": 31}, "guidance", "less than or equal to 30"),
        ({"size": "13x7"}, "size", "multiples of 8, got 13"),
        ({"seed": -1}, "seed", "greater than or equal to 0"),
        ({"force_cpu": "maybe"}, "force_cpu", "valid boolean"),
        ({"force_cpu": 1}, "force_cpu", "valid boolean"),
        ({"scheduler": "PNDM"}, "scheduler", "unknown scheduler 'PNDM'"),
        ({"stpes": 3}, "stpes", "not a field"),
        ({"async": "maybe"}, "async", 'must be true or false; got "maybe"'),
        ({"async": 1}, "async", "must be true or false; got 1"),
        ({"image": "not base64!"}, "image", "must be base64 text"),
        ({"image": 42}, "image", "must be base64 text"),
        ({"image": base64.b64encode(b"not an image").decode()}, "image",
         "must be a PNG, JPEG or WebP image"),
        ({"mask": base64.b64encode(png(mask_image())).decode()}, "mask", "needs an `image`"),
        ({"strength": 0.5}, "strength", "applies to an edit only"),
    ],
)  # fmt: skip
def test_each_bad_json_field_is_a_400_naming_field_and_rule(body, field, rule, queue):
    sent = {"prompt": "fine", **body} if body and "prompt" not in body else body
    response = post_json(sent)
    assert response.status_code == 400, response.content
    details = {d["field"]: d["message"] for d in response.json()["error"]["details"]}
    assert rule in details[field], details
    assert field in response.json()["error"]["message"]
    assert queue.recent(1) == []


@pytest.mark.parametrize(
    ("raw", "rule"),
    [
        (b"{not json", "must be a JSON document"),
        (b"[1, 2]", "must be a JSON object of the form's fields"),
    ],
)
def test_a_body_that_is_not_a_json_object_is_a_400_naming_the_body(raw, rule, queue):
    response = Client().post("/generate", raw, content_type="application/json")
    assert response.status_code == 400, response.content
    assert response.json()["error"]["details"] == [{"field": "body", "message": rule}]
    assert queue.recent(1) == []


def test_null_counts_as_absent(queue):
    response = post_json({**FIELDS, "negative_prompt": None, "scheduler": None, "async": None})
    assert response.status_code == 200, response.content
    assert response.content == post_json(FIELDS).content


def test_the_openapi_document_offers_the_json_body():
    document = json.loads(Client().get("/api/openapi.json").content)
    content = document["paths"]["/generate"]["post"]["requestBody"]["content"]
    schema = content["application/json"]["schema"]
    assert schema["required"] == ["prompt"]
    assert {"prompt", "steps", "async", "image", "mask"} <= set(schema["properties"])
    assert "multipart/form-data" in content and "application/x-www-form-urlencoded" in content


def test_a_whole_number_written_with_a_point_is_an_integer(queue):
    """JSON Schema's integer: 2.0 is one (schemathesis sends such), as the document says."""
    response = post_json({**FIELDS, "steps": 2.0, "seed": 7.0})
    assert response.status_code == 200, response.content
    assert response["X-Steps"] == "2" and response["X-Seed"] == "7"
