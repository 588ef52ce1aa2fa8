"""Every protocol's yes/no fields, in-process: a value that is not a boolean is a 400 naming
the field, never read as no (`async=maybe` once ran synchronously), and nothing is queued."""

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.test import Client

from imagegen import backend
from imagegen.generation.images import ImageStore
from tests.imagegen.api.test_generate_form import png

NATIVE = "/generate"


@pytest.mark.parametrize(
    ("path", "fields", "query", "field"),
    [
        (NATIVE, {"prompt": "a cat", "async": "maybe"}, "", "async"),
        (NATIVE, {"prompt": "a cat"}, "?async=maybe", "async"),
        (NATIVE, {"prompt": "a cat", "force_cpu": "maybe"}, "", "force_cpu"),
        (NATIVE, {"prompt": "a cat", "only_masked": "maybe"}, "", "only_masked"),
        ("/v1/images/edits", {"prompt": "a cat", "stream": "maybe"}, "", "stream"),
    ],
)
def test_a_form_flag_that_is_not_a_boolean_is_a_400_naming_it(path, fields, query, field):
    response = Client().post(path + query, fields)
    assert response.status_code == 400, response.content
    error = response.json()["error"]
    assert field in (error.get("param"), *[d["field"] for d in error["details"]])
    assert "boolean" in error["message"]
    assert backend.current_backend().jobs.recent(1) == []


@pytest.mark.parametrize(
    ("path", "body", "field"),
    [
        ("/v1/images/generations", {"prompt": "a cat", "stream": "maybe"}, "stream"),
        ("/sdapi/v1/txt2img", {"prompt": "a cat", "send_images": "maybe"}, "send_images"),
        ("/sdapi/v1/txt2img", {"prompt": "a cat", "save_images": "maybe"}, "save_images"),
        ("/sdapi/v1/img2img", {"prompt": "a cat", "init_images": ["x"],
                               "inpaint_full_res": "maybe"}, "inpaint_full_res"),
        ("/sdapi/v1/img2img", {"prompt": "a cat", "init_images": ["x"],
                               "include_init_images": "maybe"}, "include_init_images"),
    ],
)  # fmt: skip
def test_a_json_flag_that_is_not_a_boolean_is_a_400_naming_it(path, body, field):
    response = Client().post(path, body, content_type="application/json")
    assert response.status_code in (400, 422), response.content
    assert field in response.content.decode()
    assert "boolean" in response.content.decode()
    assert backend.current_backend().jobs.recent(1) == []


@pytest.mark.parametrize(
    ("path", "field"),
    [("/jobs?unfinished=maybe", "unfinished"),
     ("/sdapi/v1/progress?skip_current_image=maybe", "skip_current_image")],
)  # fmt: skip
def test_a_query_flag_that_is_not_a_boolean_is_a_400_naming_it(path, field):
    response = Client().get(path)
    assert response.status_code in (400, 422), response.content
    assert field in response.content.decode()
    assert "boolean" in response.content.decode()


@pytest.mark.parametrize("value", ["", "false", "0", "no", "off", "FALSE"])
def test_async_no_or_empty_stays_synchronous(value):
    """Refused at once for want of a model (409), not queued as a job (202)."""
    response = Client().post(NATIVE, {"prompt": "a cat", "async": value})
    assert response.status_code != 202, response.content


def test_an_edit_with_async_maybe_stores_no_input(tmp_path, monkeypatch):
    monkeypatch.setattr(backend.current_backend(), "images", ImageStore(tmp_path))
    image = SimpleUploadedFile("in.png", png((64, 64)), "image/png")
    response = Client().post(NATIVE, {"prompt": "a cat", "async": "maybe", "image": image})
    assert response.status_code == 400, response.content
    assert list(tmp_path.iterdir()) == []
