"""The MCP tools with several models offered, through the MCP SDK's own client over HTTP:
list_models lists every offered model with its state and preset, generate_image and
edit_image run the one `model` names (as POST /generate's `model` would), and a model not
offered or not on the share is an error naming it with nothing queued. In process
(served_here, on a loopback port): MODEL_ID the tiny SD model, MODELS the tiny SDXL one."""

import base64
import io
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import requests
from mcp_types import CallToolResult
from PIL import Image

from tests.support.in_process import LoopbackApp, served_here
from tests.support.local_hub import LocalHub
from tests.support.mcp_client import call_tool
from tests.support.model_service import SD_REPO, SDXL_REPO, model_service_env

SAME = {"prompt": "an mcp harbour", "size": "64x64", "steps": 2, "guidance": 5, "seed": 11}


@pytest.fixture
def app(hub_root: Path, tmp_path: Path) -> Iterator[LoopbackApp]:
    with LocalHub(hub_root) as hub:
        env = model_service_env(hub.url, tmp_path / "share", tmp_path)
        with served_here(**env, MODELS=SDXL_REPO) as served:
            yield served


def call(app: LoopbackApp, name: str, arguments: dict[str, Any]) -> CallToolResult:
    return call_tool(app.url("/mcp"), {}, name, arguments)[0]


def pulled(app: LoopbackApp, model: str) -> None:
    answer = requests.post(app.url("/model/pull"), data={"model": model}, timeout=60)
    assert answer.status_code in (200, 202), answer.text
    deadline = time.monotonic() + 120
    while (entry := state_of(app, model))["state"] != "ready":
        assert entry["state"] != "failed" and time.monotonic() < deadline, entry
        time.sleep(0.05)


def state_of(app: LoopbackApp, model: str) -> dict:
    status = requests.get(app.url("/model/status"), timeout=60).json()
    return next(entry for entry in status["models"] if entry["id"] == model)


def png_of(result: CallToolResult) -> bytes:
    assert not result.is_error, result.content
    (image,) = [block for block in result.content if block.type == "image"]
    return base64.b64decode(image.data)


def error_text(result: CallToolResult) -> str:
    assert result.is_error, result
    return " ".join(block.text for block in result.content if block.type == "text")


def test_list_models_lists_every_offered_model_with_its_state_and_preset(app):
    before = call(app, "list_models", {}).structured_content["models"]
    assert [(m["id"], m["default"], m["state"]) for m in before] == [
        (SD_REPO, True, "not_started"), (SDXL_REPO, False, "not_started"),
    ]  # fmt: skip
    assert [m["preset"]["steps"] for m in before] == [2, 20]  # each model's own default
    assert before[0]["device"] == "cpu"  # the default's whole status, as before
    assert not any(m["weights_on_share"] for m in before)

    pulled(app, SDXL_REPO)
    after = call(app, "list_models", {}).structured_content["models"]
    assert [(m["id"], m["state"]) for m in after] == [
        (SD_REPO, "not_started"),
        (SDXL_REPO, "ready"),
    ]
    assert after[1]["weights_on_share"] and after[1]["resident"]


def test_generate_image_runs_the_model_it_names_as_post_generate_does(app):
    pulled(app, SDXL_REPO)
    result = call(app, "generate_image", {**SAME, "model": "tiny-sdxl"})  # its name part
    png = png_of(result)
    job = result.structured_content["job"]
    assert job["parameters"]["model"] == SDXL_REPO
    assert job["image"]["parameters"]["model_id"] == SDXL_REPO
    native = requests.post(
        app.url("/generate"), data={**SAME, "size": "64x64", "model": SDXL_REPO}, timeout=120
    )
    assert native.status_code == 200, native.text
    assert native.headers["X-Model"] == SDXL_REPO and native.content == png  # the same bytes


def test_edit_image_runs_the_model_it_names(app):
    pulled(app, SDXL_REPO)
    picture = io.BytesIO()
    Image.fromarray(np.full((64, 64, 3), 90, np.uint8)).save(picture, format="PNG")
    edited = call(app, "edit_image", {
        "prompt": "a blue wall", "image": base64.b64encode(picture.getvalue()).decode(),
        "steps": 2, "model": SDXL_REPO,
    })  # fmt: skip
    assert Image.open(io.BytesIO(png_of(edited))).size == (64, 64)
    job = edited.structured_content["job"]
    assert job["parameters"]["model"] == SDXL_REPO and "edit" in job["parameters"]


def test_a_model_not_offered_or_not_on_the_share_is_an_error_naming_it_with_nothing_queued(app):
    unknown = error_text(call(app, "generate_image", {"prompt": "x", "model": "dall-e-3"}))
    assert f"model: 'dall-e-3' is not offered; offered: {SD_REPO}, {SDXL_REPO}" in unknown
    absent = error_text(call(app, "generate_image", {"prompt": "x", "model": SDXL_REPO}))
    assert SDXL_REPO in absent and "pull" in absent, absent
    edit = error_text(call(app, "edit_image", {"prompt": "x", "image": "aGVsbG8=",
                                               "model": "nope"}))  # fmt: skip
    assert "model: 'nope' is not offered" in edit
    assert requests.get(app.url("/jobs"), timeout=60).json() == []
