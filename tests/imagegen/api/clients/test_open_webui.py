"""Replays of the requests Open WebUI sends for its "Automatic1111" and "OpenAI" image engines
(backend/open_webui/routers/images.py: set_image_model, get_models, image_generations),
header for header and field for field, and the way it reads the answers. In distributed mode,
the Automatic1111 engine's model setting and generation; the links it fetches are the openai
SDK's (test_openai_sdk.py, both modes)."""

import base64
import contextlib
import io
import re

import pytest
import requests
from PIL import Image

from tests.imagegen.api.clients.conftest import TOKEN, jobs
from tests.support.processes import AppServer

# Open WebUI's defaults: IMAGE_URL_RESPONSE_MODELS_REGEX_PATTERN, and the size it sends.
URL_RESPONSE_MODELS = "^gpt-image"
IMAGE_SIZE = "64x64"
IMAGE_STEPS = 2


def automatic1111_api_auth(api_auth: str | None) -> str:
    """get_automatic1111_api_auth: 'user:password' as Basic; '' when unset."""
    if api_auth is None:
        return ""
    return f"Basic {base64.b64encode(api_auth.encode('utf-8')).decode('utf-8')}"


def get_image_data(data: str, headers: dict | None = None) -> tuple[bytes, str]:
    """How Open WebUI turns an answer's image into bytes: a URL is fetched (with the
    engine's headers but Content-Type), anything else is base64."""
    if data.startswith(("http://", "https://")):
        response = requests.get(data, headers=headers)
        response.raise_for_status()
        assert response.headers["content-type"].split("/")[0] == "image"
        return response.content, response.headers["content-type"]
    if "," in data:
        header, encoded = data.split(",", 1)
        return base64.b64decode(encoded), header.split(";")[0].removeprefix("data:")
    return base64.b64decode(data), "image/png"


def set_image_model(app: AppServer, auth: str, model: str) -> None:
    options = requests.get(app.url("/sdapi/v1/options"), headers={"authorization": auth}).json()
    if model != options["sd_model_checkpoint"]:
        options["sd_model_checkpoint"] = model
        requests.post(
            app.url("/sdapi/v1/options"), json=options, headers={"authorization": auth}
        ).raise_for_status()


def a1111_generate(app: AppServer, api_auth: str | None, model: str, prompt: str, n: int):
    """set_image_model (its errors only logged), then image_generations for engine
    automatic1111."""
    base_url, auth = app.url(""), automatic1111_api_auth(api_auth)
    with contextlib.suppress(Exception):  # Open WebUI only logs it
        set_image_model(app, auth, model)
    width, height = map(int, IMAGE_SIZE.split("x"))
    data = {"prompt": prompt, "batch_size": n, "width": width, "height": height,
            "steps": IMAGE_STEPS}  # fmt: skip
    r = requests.post(f"{base_url}/sdapi/v1/txt2img", json=data, headers={"authorization": auth})
    res = r.json()  # Open WebUI reads the body whatever the status
    return [get_image_data(image) for image in res["images"]], res["info"]


def openai_generate(app: AppServer, api_key: str, model: str, prompt: str, n: int = 1) -> list:
    """image_generations for engine openai, IMAGES_OPENAI_API_BASE_URL = <service>/v1."""
    headers = {"Authorization": f"Bearer {api_key}", "Content-Type": "application/json"}
    data = {
        "model": model,
        "prompt": prompt,
        "n": n,
        "size": IMAGE_SIZE,
        **({} if re.match(URL_RESPONSE_MODELS, model) else {"response_format": "b64_json"}),
    }
    r = requests.post(f"{app.url('/v1')}/images/generations", json=data, headers=headers)
    r.raise_for_status()
    images = []
    for image in r.json()["data"]:
        if image_url := image.get("url", None):
            fetch_headers = {k: v for k, v in headers.items() if k != "Content-Type"}
            images.append(get_image_data(image_url, fetch_headers))
        else:
            images.append(get_image_data(image["b64_json"]))
    return images


def is_png(image: tuple[bytes, str], size: tuple[int, int] = (64, 64)) -> bool:
    data, content_type = image
    return content_type == "image/png" and Image.open(io.BytesIO(data)).size == size


def test_the_model_list_open_webui_builds(app):
    auth = automatic1111_api_auth(f"openwebui:{TOKEN}")
    models = requests.get(app.url("/sdapi/v1/sd-models"), headers={"authorization": auth}).json()
    listed = [{"id": m["title"], "name": m["model_name"]} for m in models]
    assert listed == [{"id": "testorg/tiny-sd", "name": "tiny-sd"}]


def a1111_with_api_auth(app: AppServer, model: str) -> None:
    prompt = f"owui a1111 {model}"
    images, info = a1111_generate(app, f"openwebui:{TOKEN}", model, prompt, n=2)
    assert len(images) == 2 and all(is_png(image) for image in images)
    assert '"all_seeds"' in info
    found = jobs(app, prompt)
    assert len(found) == 2 and {j["parameters"]["steps"] for j in found} == {IMAGE_STEPS}


@pytest.mark.both_modes
def test_automatic1111_engine_with_api_auth_setting_the_models_name(app):
    a1111_with_api_auth(app, "tiny-sd")  # not the listed title: Open WebUI posts /options


def test_automatic1111_engine_with_api_auth_and_the_models_title(app):
    a1111_with_api_auth(app, "testorg/tiny-sd")  # the listed title: no /options post


@pytest.mark.parametrize("api_auth", [None, ""])
def test_automatic1111_engine_without_api_auth_on_an_open_service(open_app, api_auth):
    """No credentials configured in Open WebUI: it sends an empty `authorization` header,
    or a bare `Basic ` one; an open service takes both."""
    images, _ = a1111_generate(open_app, api_auth, "testorg/tiny-sd", "owui open", n=1)
    assert len(images) == 1 and is_png(images[0])


def test_automatic1111_engine_with_a_wrong_password_gets_no_images(app):
    auth = automatic1111_api_auth("openwebui:wrong")
    with pytest.raises(KeyError):  # its options read finds no sd_model_checkpoint
        set_image_model(app, auth, "tiny-sd")
    with pytest.raises(KeyError):  # and the txt2img answer no images: the user sees an error
        a1111_generate(app, "openwebui:wrong", "tiny-sd", "owui wrong", n=1)
    refused = requests.post(app.url("/sdapi/v1/txt2img"), json={}, headers={"authorization": auth})
    assert refused.status_code == 401
    assert jobs(app, "owui wrong") == []


@pytest.mark.parametrize("model", ["dall-e-2", "dall-e-3"])
def test_openai_engine_with_a_dall_e_model_asks_for_b64_json(app, model):
    images = openai_generate(app, TOKEN, model, f"owui {model}")
    assert len(images) == 1 and is_png(images[0])


@pytest.mark.parametrize("model", ["gpt-image-1", "gpt-image-1.5"])
def test_openai_engine_with_a_gpt_image_model_sends_no_response_format(app, model):
    images = openai_generate(app, TOKEN, model, f"owui {model}", n=2)
    assert len(images) == 2 and all(is_png(image) for image in images)


def test_openai_engine_fetching_a_url_with_its_headers(app):
    """A compatible server may answer links; Open WebUI fetches them with its Bearer header
    (and the SSRF check aside, nothing else)."""
    headers = {"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"}
    body = {"model": "dall-e-2", "prompt": "owui url", "n": 1, "size": IMAGE_SIZE,
            "response_format": "url"}  # fmt: skip
    r = requests.post(app.url("/v1/images/generations"), json=body, headers=headers)
    url = r.json()["data"][0]["url"]
    assert is_png(get_image_data(url, {"Authorization": headers["Authorization"]}))
