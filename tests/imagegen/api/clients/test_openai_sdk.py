"""The openai Python SDK, unchanged, against the service with API_TOKEN set: images as
base64 and as signed links, n images with their seeds, OpenAI's error shapes."""

import base64
import io
import json
import time

import openai
import pytest
import requests
from django.test import override_settings
from PIL import Image

from tests.imagegen.api.clients.conftest import BEARER, TOKEN, jobs
from tests.support.processes import AppServer


def client(app: AppServer, api_key: str = TOKEN) -> openai.OpenAI:
    return openai.OpenAI(base_url=app.url("/v1"), api_key=api_key, max_retries=0)


def png_parameters(png: bytes) -> dict:
    """The generation parameters a stored PNG carries in its text chunks."""
    return json.loads(Image.open(io.BytesIO(png)).text["imagegen"])


@pytest.mark.both_modes
def test_b64_json_is_a_png_made_by_an_ordinary_job(app):
    result = client(app).images.generate(
        prompt="sdk b64 lighthouse",
        size="64x64",
        response_format="b64_json",
        extra_body={"seed": 42, "steps": 3, "guidance_scale": 5.5, "negative_prompt": "fog"},
    )
    assert abs(result.created - time.time()) < 120
    (image,) = result.data
    assert image.url is None
    png = base64.b64decode(image.b64_json)
    assert Image.open(io.BytesIO(png)).size == (64, 64)
    assert png_parameters(png).items() >= {
        "prompt": "sdk b64 lighthouse", "negative_prompt": "fog", "steps": 3, "guidance": 5.5,
        "width": 64, "height": 64, "seed": 42, "model_id": "testorg/tiny-sd",
    }.items()  # fmt: skip
    (job,) = jobs(app, "sdk b64 lighthouse")  # one job in the one queue, its image stored
    assert job["state"] == "succeeded" and job["parameters"]["seed"] == 42
    stored = requests.get(app.url(job["image_url"]), headers=BEARER)
    assert stored.content == png


@pytest.mark.both_modes
def test_url_is_an_absolute_signed_link_that_works_without_headers(app):
    result = client(app).images.generate(prompt="sdk url", size="64x64", response_format="url")
    (image,) = result.data
    assert image.b64_json is None
    assert image.url.startswith(app.base_url + "/v1/images/")
    fetched = requests.get(image.url)  # no token, no headers: as Open WebUI fetches it
    assert fetched.status_code == 200
    assert fetched.headers["Content-Type"] == "image/png"
    (job,) = jobs(app, "sdk url")
    assert fetched.content == requests.get(app.url(job["image_url"]), headers=BEARER).content
    assert requests.get(app.url(job["image_url"])).status_code == 401  # the open route stays shut


def test_a_tampered_link_or_one_for_another_image_is_refused(app):
    first, second = (
        client(app)
        .images.generate(prompt="sdk links", size="64x64", response_format="url", n=2)
        .data
    )
    path, signature = first.url.split("?signature=")
    tampered = signature[:-1] + ("A" if signature[-1] != "A" else "B")
    for url in (f"{path}?signature={tampered}", f"{path}?signature=", path,
                second.url.split("?")[0] + "?signature=" + signature):  # fmt: skip
        refused = requests.get(url)
        assert refused.status_code in (400, 403), url
        assert set(refused.json()["error"]) >= {"message", "type", "param", "code"}
    assert requests.get(first.url).status_code == 200


def test_an_expired_link_is_refused(app):
    (image,) = (
        client(app).images.generate(prompt="sdk expiry", size="64x64", response_format="url").data
    )
    assert requests.get(image.url).status_code == 200
    # IMAGE_URL_TTL is read as a link is checked: this one is past a TTL of 1 s.
    time.sleep(1.5)
    with override_settings(IMAGE_URL_TTL=1):
        expired = requests.get(image.url)
    assert expired.status_code == 403
    assert "expired" in expired.json()["error"]["message"]


def test_a_link_behind_the_trusted_proxy_uses_its_scheme_and_host(app):
    response = requests.post(
        app.url("/v1/images/generations"),
        json={"prompt": "sdk azure", "size": "64x64", "response_format": "url"},
        headers={
            **BEARER,
            "X-Forwarded-Proto": "https",
            "X-Forwarded-Host": "localhost:8443",
            "X-Forwarded-For": "198.51.100.4",
        },
    )
    assert response.status_code == 200, response.text
    assert response.json()["data"][0]["url"].startswith("https://localhost:8443/v1/images/")


def test_n_images_are_n_jobs_with_consecutive_seeds(app):
    result = client(app).images.generate(
        prompt="sdk two", size="64x64", n=2, extra_body={"seed": 4294967295}
    )
    seeds = [png_parameters(base64.b64decode(d.b64_json))["seed"] for d in result.data]
    assert seeds == [4294967295, 0]  # seed, seed + 1 (wrapping)
    found = jobs(app, "sdk two")
    assert sorted(j["parameters"]["seed"] for j in found) == [0, 4294967295]
    assert all(j["state"] == "succeeded" for j in found)


def test_size_auto_is_the_native_size_and_unknown_keys_are_ignored(app):
    result = client(app).images.generate(
        prompt="sdk auto", size="auto", model="gpt-image-1", quality="high", style="vivid",
        user="someone", output_format="png", moderation="low", background="auto",
        extra_body={"unknown": {"nested": [1, 2]}, "steps": 1},
    )  # fmt: skip
    png = base64.b64decode(result.data[0].b64_json)
    assert Image.open(io.BytesIO(png)).size == (64, 64)  # the tiny model's native size


@pytest.mark.parametrize(
    ("fields", "param"),
    [
        ({"size": "65x64"}, "size"),
        ({"size": "4096x4096"}, "size"),
        ({"n": 0}, "n"),
        ({"output_format": "gif"}, "output_format"),
        ({"output_format": "jpeg", "output_compression": 101}, "output_compression"),
        ({"response_format": "jpeg"}, "response_format"),
        ({"prompt": " \u200b "}, "prompt"),
    ],
)
def test_a_bad_field_is_a_bad_request_naming_it(app, fields, param):
    request = {"prompt": f"sdk refused {param}", **fields}
    with pytest.raises(openai.BadRequestError) as refused:
        client(app).images.generate(**request)
    assert refused.value.status_code == 400
    assert refused.value.param == param
    assert refused.value.type == "invalid_request_error"
    assert jobs(app, f"sdk refused {param}") == []


def test_a_wrong_token_is_an_authentication_error(app):
    for api_key in ("wrong", TOKEN + "x"):
        with pytest.raises(openai.AuthenticationError) as refused:
            client(app, api_key).images.generate(prompt="sdk no", size="64x64")
        assert refused.value.status_code == 401
        assert refused.value.code == "invalid_api_key"
        with pytest.raises(openai.AuthenticationError):
            client(app, api_key).models.list()
    assert jobs(app, "sdk no") == []
    # The token as Basic's password is for the A1111 routes only: here the challenge is Bearer.
    refused = requests.get(app.url("/v1/models"), auth=("user", TOKEN))
    assert refused.status_code == 401
    assert refused.headers["WWW-Authenticate"] == "Bearer"


def test_models_lists_the_configured_model(app):
    models = client(app).models.list()
    assert [model.id for model in models.data] == ["testorg/tiny-sd"]


def test_errors_under_v1_take_openais_shape(app):
    missing = requests.get(app.url("/v1/nothing-here"), headers=BEARER)
    assert missing.status_code == 404
    assert missing.json() == {"error": {"message": "Not Found", "type": "invalid_request_error",
                                        "param": None, "code": "not_found"}}  # fmt: skip
    assert missing.headers["x-should-retry"] == "false"
    with pytest.raises(openai.NotFoundError):
        client(app).files.list()


@pytest.mark.both_modes
def test_a_streamed_generation_sends_its_partial_images_then_the_image(app):
    stream = client(app).images.generate(
        prompt="sdk streamed harbour", size="64x64", stream=True, partial_images=2,
        extra_body={"seed": 11, "steps": 6},
    )  # fmt: skip
    events = list(stream)  # to its completed event, as the SDK parses them
    assert [event.type for event in events] == [
        "image_generation.partial_image", "image_generation.partial_image",
        "image_generation.completed",
    ]  # fmt: skip
    partials, completed = events[:2], events[2]
    assert [event.partial_image_index for event in partials] == [0, 1]
    for event in partials:
        partial = Image.open(io.BytesIO(base64.b64decode(event.b64_json)))
        assert partial.format == "PNG" and event.output_format == "png"
        assert max(partial.size) <= 64 // 4 and event.size == f"{partial.width}x{partial.height}"
    png = base64.b64decode(completed.b64_json)
    assert completed.size == "64x64" and completed.output_format == "png"
    (job,) = jobs(app, "sdk streamed harbour")
    assert job["state"] == "succeeded" and job["parameters"]["partial_images"] == 2
    assert requests.get(app.url(job["image_url"]), headers=BEARER).content == png


def test_a_streamed_job_of_few_steps_sends_fewer_partial_images_and_n_must_be_1(app):
    events = list(client(app).images.generate(
        prompt="sdk streamed short", size="64x64", stream=True, partial_images=3,
        output_format="jpeg", extra_body={"steps": 2},
    ))  # fmt: skip
    assert [event.type for event in events] == [
        "image_generation.partial_image",
        "image_generation.completed",
    ]
    assert Image.open(io.BytesIO(base64.b64decode(events[0].b64_json))).format == "JPEG"
    with pytest.raises(openai.BadRequestError) as refused:
        client(app).images.generate(prompt="sdk two streamed", stream=True, n=2)
    assert "n" in str(refused.value) and "stream" in str(refused.value)
    with pytest.raises(openai.BadRequestError):
        client(app).images.generate(prompt="sdk too many", stream=True, partial_images=4)
