"""The MCP SDK's own client against /mcp on the app with API_TOKEN set (this process's, on a
loopback port; a web replica in distributed mode), as a desktop agent connects to it
(docs/protocols.md): it lists the tools, generates an image with
progress on the way, cancels a job; without the token it is refused. In process, every tool
and the synchronous bound: tests/imagegen/api/test_mcp.py."""

import base64
import io
import json
import re
from typing import Any

import pytest
import requests
from mcp.shared.exceptions import MCPError
from mcp_types import CallToolResult
from PIL import Image

from tests.imagegen.api.clients.conftest import (
    BEARER,
    TOKEN,
    cancel,
    jobs,
    start_blocker,
    wait_until,
)
from tests.support.mcp_client import Progress, call_tool, tool_names
from tests.support.processes import ROOT, AppServer


def call(
    app: AppServer, name: str, arguments: dict[str, Any], headers: dict[str, str] = BEARER
) -> tuple[CallToolResult, Progress]:
    return call_tool(app.url("/mcp"), headers, name, arguments)


@pytest.mark.both_modes
def test_the_sdk_client_lists_the_tools_and_generates_an_image_with_progress(app):
    names = tool_names(app.url("/mcp"), BEARER)
    assert names == {"generate_image", "edit_image", "list_models", "get_job", "cancel_job"}
    result, progress = call(
        app, "generate_image", {"prompt": "mcp harbour", "size": "64x64", "steps": 3, "seed": 9}
    )
    assert not result.is_error, result.content
    (image,) = [block for block in result.content if block.type == "image"]
    png = base64.b64decode(image.data)
    assert Image.open(io.BytesIO(png)).size == (64, 64)
    assert progress and progress[-1][0] == 1.0, progress
    link = result.structured_content["url"]
    assert link.startswith(app.base_url + "/v1/images/")
    assert requests.get(link).content == png  # the link needs no token
    (job,) = jobs(app, "mcp harbour")  # an ordinary job of the one queue
    assert job["id"] == result.structured_content["job"]["id"] and job["parameters"]["seed"] == 9
    listed, _ = call(app, "list_models", {})
    (model,) = listed.structured_content["models"]  # MODELS unset: MODEL_ID alone
    assert (model["id"], model["default"], model["state"]) == (job["image"]["parameters"][
        "model_id"], True, "ready")  # fmt: skip


@pytest.mark.both_modes
def test_the_sdk_client_cancels_a_queued_job(app):
    blocker = start_blocker(app, "mcp blocker")
    queued, _ = call(app, "generate_image", {"prompt": "mcp queued", "size": "64x64",
                                             "wait": False})  # fmt: skip
    assert queued.structured_content["state"] == "queued", queued.content
    cancelled, _ = call(app, "cancel_job", {"job_id": queued.structured_content["id"]})
    assert cancelled.structured_content["state"] == "cancelled", cancelled.content
    (job,) = jobs(app, "mcp queued")
    assert job["state"] == "cancelled"
    call(app, "cancel_job", {"job_id": blocker})


def documented_client_config() -> dict[str, Any]:
    """The desktop client's JSON in docs/protocols.md's MCP section."""
    text = (ROOT / "docs" / "protocols.md").read_text()
    section = text.split("## Agents: the Model Context Protocol (MCP)", 1)[1]
    (block,) = re.findall(r"^```json\n(.*?)^```", section, flags=re.M | re.S)
    return json.loads(block)["mcpServers"]["imagegen"]


def test_the_documented_client_config_connects(app):
    config = documented_client_config()
    url = config["url"].replace("https://<host>", app.base_url)
    headers = {k: v.replace("<API_TOKEN>", TOKEN) for k, v in config["headers"].items()}
    assert url == app.url("/mcp")
    assert "generate_image" in tool_names(url, headers)


def test_without_the_token_mcp_is_refused(app):
    initialize: dict[str, Any] = {
        "jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                   "clientInfo": {"name": "t", "version": "1"}},
    }  # fmt: skip
    headers = {"Accept": "application/json, text/event-stream"}
    for wrong in ({}, {"Authorization": "Bearer wrong"}):
        refused = requests.post(app.url("/mcp"), json=initialize, headers={**headers, **wrong})
        assert refused.status_code == 401, refused.text
        assert "error" in refused.json()
    with pytest.RaisesGroup(MCPError, flatten_subgroups=True):  # the SDK client: the 401
        tool_names(app.url("/mcp"), {})
    taken = requests.post(app.url("/mcp"), json=initialize, headers={**headers, **BEARER})
    assert taken.status_code == 200, taken.text
    assert taken.headers["Content-Type"].startswith("text/event-stream")
    assert taken.headers["X-Accel-Buffering"] == "no"  # a front proxy passes each event at once
    (data,) = [line for line in taken.text.splitlines() if line.startswith("data:")]
    assert json.loads(data.removeprefix("data:"))["result"]["serverInfo"]["name"] == "imagegen"


@pytest.mark.both_modes
def test_a_client_gone_while_waiting_has_its_job_cancelled(gunicorn_app):
    """As an ASGI server would: the call is cancelled when its client goes away, and with it
    the job nobody will collect (found at the first progress written after it left). Under
    gunicorn, whose write to the gone client fails at once (Django's test server in this
    process notices only when the job ends)."""
    app = gunicorn_app
    blocker = start_blocker(app, "mcp blocker gone")
    body = {
        "jsonrpc": "2.0", "id": 1, "method": "tools/call",
        "params": {"name": "generate_image", "_meta": {"progressToken": 1},
                   "arguments": {"prompt": "mcp gone", "size": "64x64", "steps": 400}},
    }  # fmt: skip
    headers = {**BEARER, "Accept": "application/json, text/event-stream",
               "MCP-Protocol-Version": "2025-06-18"}  # fmt: skip
    with requests.post(app.url("/mcp"), json=body, headers=headers, stream=True) as answer:
        assert answer.status_code == 200, answer.text
        lines = answer.iter_lines(decode_unicode=True)
        first = next(line for line in lines if line.startswith("data:"))
        assert json.loads(first.removeprefix("data:"))["method"] == "notifications/progress"
    cancel(app, blocker)  # the call's job runs now, and reports its steps to nobody
    wait_until(lambda: jobs(app, "mcp gone")[0]["state"] in ("cancelled", "succeeded"))
    (job,) = jobs(app, "mcp gone")
    assert job["state"] == "cancelled", job
