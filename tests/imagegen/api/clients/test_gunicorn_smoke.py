"""Each protocol's real client against the app under gunicorn (config/gunicorn.py, in-process
jobs), with API_TOKEN set: the openai SDK, webuiapi and the MCP SDK's client get their image
through gunicorn's threads as a deployment serves them. Everything else of these protocols is
tested on this process's app (the package's other modules); in distributed mode the
`both_modes` tests run on web replicas under gunicorn."""

import base64
import io

import openai
import pytest
import requests
import webuiapi
from PIL import Image

from tests.imagegen.api.clients.conftest import BEARER, TOKEN
from tests.support.mcp_client import call_tool
from tests.support.processes import AppServer


@pytest.fixture
def served(gunicorn_token_app: AppServer) -> AppServer:
    return gunicorn_token_app


def test_the_openai_sdk_gets_an_image_and_its_signed_link(served: AppServer) -> None:
    sdk = openai.OpenAI(base_url=served.url("/v1"), api_key=TOKEN, max_retries=0)
    (image,) = sdk.images.generate(prompt="smoke sdk", size="64x64", response_format="url").data
    assert image.url and image.url.startswith(served.base_url + "/v1/images/")
    fetched = requests.get(image.url, timeout=30)  # no token: the link is signed
    assert fetched.status_code == 200
    assert Image.open(io.BytesIO(fetched.content)).size == (64, 64)


def test_webuiapi_gets_an_image_with_the_token_as_basics_password(served: AppServer) -> None:
    api = webuiapi.WebUIApi(baseurl=served.url("/sdapi/v1"), username="webui", password=TOKEN)
    result = api.txt2img(prompt="smoke webui", seed=7, steps=2, width=64, height=64)
    assert [image.size for image in result.images] == [(64, 64)]
    assert result.info["seed"] == 7
    assert api.get_progress()["state"]["job_count"] == 0


def test_the_mcp_client_generates_an_image_with_progress(served: AppServer) -> None:
    result, progress = call_tool(served.url("/mcp"), BEARER, "generate_image",
                                 {"prompt": "smoke mcp", "size": "64x64", "steps": 2})  # fmt: skip
    assert not result.is_error, result.content
    (image,) = [block for block in result.content if block.type == "image"]
    assert Image.open(io.BytesIO(base64.b64decode(image.data))).size == (64, 64)
    assert progress and progress[-1][0] == 1.0, progress
