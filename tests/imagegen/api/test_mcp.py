"""The MCP server at /mcp in process, driven by the MCP SDK's own client over its streamable
HTTP transport: httpx to Django's whole stack (a2wsgi presents the WSGI app as ASGI to httpx's
ASGI transport), the route, the bridge to the SDK's server, the tools, and the tiny pipeline
in the in-process job mode. Against the app under gunicorn, in both job modes and with a
token: tests/imagegen/api/clients/test_mcp.py."""

import base64
import contextlib
import io
import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import httpx2
import numpy as np
import pytest
from a2wsgi import WSGIMiddleware
from django.core.handlers.wsgi import WSGIHandler
from django.test import Client as DjangoClient
from mcp.client import Client
from mcp.client.streamable_http import streamable_http_client
from mcp_types import CallToolResult
from PIL import Image

from core.asgi_bridge import LifespanFailed
from core.errors import ServiceError
from imagegen import backend
from imagegen.api import mcp_tools, places
from imagegen.api.mcp import PATH
from imagegen.api.mcp_tools import WAIT_FALSE
from imagegen.errors import SyncWaitersBusy
from imagegen.generation.jobs import JobQueue
from imagegen.generation.requests import GenerationRequest
from imagegen.model.loader import ModelLoader
from tests.support.loaders import pulled_loader, serve
from tests.support.mcp_client import run_async
from tests.support.processes import ROOT

TOOLS = {"generate_image", "edit_image", "list_models", "get_job", "cancel_job"}


@pytest.fixture(scope="module")
def loader(hub_root: Path, tmp_path_factory: pytest.TempPathFactory) -> ModelLoader:
    """The tiny model pulled and loaded once for the module: no test changes its state."""
    return pulled_loader(hub_root, tmp_path_factory.mktemp("mcp"))


@pytest.fixture
def queue(loader: ModelLoader, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> JobQueue:
    """A queue and images of the test's own on the module's model."""
    return serve(loader, tmp_path / "images", monkeypatch)


def session(use: Callable[[Client], Awaitable[Any]]) -> Any:
    """Runs `use` with an MCP client connected to this process's Django app at /mcp."""

    async def main() -> Any:
        transport = httpx2.ASGITransport(app=WSGIMiddleware(WSGIHandler()))  # type: ignore[arg-type]
        async with httpx2.AsyncClient(transport=transport, base_url="http://testserver") as http:
            connection = streamable_http_client("http://testserver/mcp", http_client=http)
            async with Client(connection) as client:
                return await use(client)

    return run_async(main)


def call(name: str, arguments: dict[str, Any], seen: list | None = None) -> CallToolResult:
    """The tool's answer; its progress notifications are appended to `seen`."""

    async def use(client: Client) -> CallToolResult:
        async def on_progress(progress: float, total: float | None, message: str | None) -> None:
            if seen is not None:
                seen.append((progress, total, message))

        return await client.call_tool(name, arguments, progress_callback=on_progress)

    return session(use)


def png_of(result: CallToolResult) -> bytes:
    assert not result.is_error, result.content
    (image,) = [block for block in result.content if block.type == "image"]
    assert image.mime_type == "image/png"
    return base64.b64decode(image.data)


def error_text(result: CallToolResult) -> str:
    assert result.is_error, result
    return " ".join(block.text for block in result.content if block.type == "text")


def test_the_client_lists_the_five_tools_with_their_arguments(queue):
    tools = session(lambda client: client.list_tools()).tools
    assert {tool.name for tool in tools} == TOOLS
    generate = next(tool for tool in tools if tool.name == "generate_image")
    assert generate.input_schema["required"] == ["prompt"]
    assert {"prompt", "size", "steps", "seed", "wait"} <= set(generate.input_schema["properties"])


def test_generate_answers_the_png_and_a_signed_link_to_it_with_progress_on_the_way(queue):
    progress: list = []
    result = call(
        "generate_image",
        {"prompt": "an mcp lighthouse", "size": "64x64", "steps": 3, "seed": 7},
        progress,
    )
    png = png_of(result)
    assert Image.open(io.BytesIO(png)).size == (64, 64)
    job = result.structured_content["job"]
    assert job["state"] == "succeeded"
    assert job["parameters"]["prompt"] == "an mcp lighthouse" and job["parameters"]["seed"] == 7
    link = result.structured_content["url"]
    (resource,) = [block for block in result.content if block.type == "resource_link"]
    assert resource.uri == link and link.startswith("http://testserver/v1/images/")
    fetched = DjangoClient().get(link.removeprefix("http://testserver"))
    assert fetched.status_code == 200 and fetched.content == png  # the link needs no token
    fractions = [done for done, _total, _message in progress]
    assert fractions == sorted(set(fractions)), progress  # MCP's progress only grows
    assert fractions[-1] == 1.0 and any(0 < f < 1 for f in fractions), progress
    assert any("step 1 of 3" in (message or "") for *_, message in progress), progress


def test_without_waiting_the_job_comes_at_once_and_get_job_answers_its_image(queue):
    result = call("generate_image", {"prompt": "an mcp queued one", "size": "64x64",
                                     "steps": 2, "wait": False})  # fmt: skip
    assert not result.is_error, result.content
    job = result.structured_content
    assert job["state"] in ("queued", "running")
    done = queue.wait(job["id"], 60)
    assert done is not None and done.state.value == "succeeded"
    answer = call("get_job", {"job_id": job["id"]})
    assert Image.open(io.BytesIO(png_of(answer))).size == (64, 64)
    assert answer.structured_content["job"]["id"] == job["id"]


def test_cancel_job_cancels_a_queued_job_and_get_job_says_so(queue):
    blocker = queue.submit(GenerationRequest(prompt="mcp blocker", steps=400, size=(64, 64)))
    waiting = call("generate_image", {"prompt": "mcp to cancel", "size": "64x64",
                                      "wait": False}).structured_content  # fmt: skip
    cancelled = call("cancel_job", {"job_id": waiting["id"]})
    assert not cancelled.is_error, cancelled.content
    assert cancelled.structured_content["state"] == "cancelled"
    assert call("get_job", {"job_id": waiting["id"]}).structured_content["state"] == "cancelled"
    stopping = call("cancel_job", {"job_id": blocker.id}).structured_content
    assert stopping["id"] == blocker.id and stopping["phase"].startswith("cancelling"), stopping
    assert queue.wait(blocker.id, 60).state.value == "cancelled"
    assert "No such job" in error_text(call("get_job", {"job_id": "nope"}))


@pytest.mark.parametrize(
    ("arguments", "field"),
    [
        ({"prompt": "x", "size": "65x64"}, "size"),
        ({"prompt": "   "}, "prompt"),
        ({"prompt": "x", "steps": 0}, "steps"),
        ({"prompt": "x", "seed": -1}, "seed"),
    ],
)
def test_a_bad_argument_is_an_error_naming_it_with_nothing_queued(queue, arguments, field):
    text = error_text(call("generate_image", arguments))
    assert field in text
    assert queue.recent(10) == []


def test_edit_image_repaints_what_the_mask_marks_of_a_stored_image(queue):
    first = call("generate_image", {"prompt": "mcp source", "size": "64x64", "seed": 3})
    source = png_of(first)
    mask = np.zeros((64, 64), np.uint8)
    mask[16:48, 16:48] = 255
    buffer = io.BytesIO()
    Image.fromarray(mask).save(buffer, format="PNG")
    edited = call("edit_image", {
        "prompt": "a red door", "image_id": first.structured_content["job"]["image"]["id"],
        "mask": base64.b64encode(buffer.getvalue()).decode(), "strength": 1, "seed": 4,
    })  # fmt: skip
    got = np.asarray(Image.open(io.BytesIO(png_of(edited))).convert("RGB"))
    sent = np.asarray(Image.open(io.BytesIO(source)).convert("RGB"))
    assert (got[:4, :4] == sent[:4, :4]).all()  # far from the mask: the input's own
    assert (got[24:40, 24:40] != sent[24:40, 24:40]).any()
    edit = edited.structured_content["job"]["parameters"]["edit"]
    assert edit["strength"] == 1


def test_list_models_names_the_configured_model_and_its_state(queue):
    result = call("list_models", {})
    (model,) = result.structured_content["models"]
    assert model["id"] == "testorg/tiny-sd" and model["state"] == "ready"


def test_a_waited_generation_estimated_past_the_bound_is_refused_at_once(queue, settings):
    """As every synchronous route: past 1.25 x GEN_SYNC_TIMEOUT by the estimate, refused with
    the estimate's message and nothing queued."""
    settings.GEN_SYNC_TIMEOUT = 10
    png_of(call("generate_image", {"prompt": "measured", "size": "64x64", "steps": 2}))
    before = len(queue.recent(50))
    text = error_text(call("generate_image", {"prompt": "too long", "size": "2048x2048",
                                              "steps": 100}))  # fmt: skip
    assert "This request would take about " in text and "GEN_SYNC_TIMEOUT" in text, text
    assert text.endswith(WAIT_FALSE)
    assert len(queue.recent(50)) == before
    # Not waited for, the same request is taken: it is the caller's to follow.
    taken = call("generate_image", {"prompt": "too long", "size": "2048x2048", "steps": 100,
                                    "wait": False})  # fmt: skip
    assert not taken.is_error, taken.content
    call("cancel_job", {"job_id": taken.structured_content["id"]})


def test_a_waited_generation_past_gen_sync_timeout_is_an_error_and_its_job_cancelled(
    queue, settings
):
    settings.GEN_SYNC_TIMEOUT = 2
    settings.GEN_SYNC_REFUSE_FACTOR = 0  # waits its timeout out, estimated or not
    blocker = queue.submit(GenerationRequest(prompt="mcp blocker", steps=400, size=(64, 64)))
    text = error_text(call("generate_image", {"prompt": "mcp late", "size": "64x64"}))
    assert "No image within GEN_SYNC_TIMEOUT" in text and text.endswith(WAIT_FALSE), text
    (late,) = [job for job in queue.recent(10) if job.parameters.prompt == "mcp late"]
    assert late.state.value == "cancelled"
    queue.cancel(blocker.id)


def test_edit_image_takes_the_picture_as_base64_wrapped_or_not_or_a_data_url(queue):
    picture = io.BytesIO()
    Image.fromarray(np.full((64, 72, 3), 90, np.uint8)).save(picture, format="PNG")
    encoded = base64.b64encode(picture.getvalue()).decode()
    wrapped = "\n".join(encoded[at : at + 76] for at in range(0, len(encoded), 76))
    for sent in (encoded, f"data:image/png;base64,{encoded}", wrapped):  # as MIME wraps it
        edited = call("edit_image", {"prompt": "a blue wall", "image": sent, "steps": 2})
        assert Image.open(io.BytesIO(png_of(edited))).size == (72, 64)  # the input's size
        assert edited.structured_content["job"]["parameters"]["edit"]["strength"] == 0.75


@pytest.mark.parametrize(
    ("arguments", "rule"),
    [
        ({}, "image: send either image (base64) or image_id"),
        ({"image": "aGVsbG8=", "image_id": "x"}, "image: send either image (base64) or image_id"),
        ({"image": "not base64!"}, "image: must be base64"),
        ({"image": "aGVsbG8="}, "image: "),  # base64, but not an image
        ({"image_id": "20990101T000000000000Z-abcdef"}, "No such image"),
    ],
)
def test_a_bad_picture_to_edit_is_an_error_naming_it_with_nothing_queued(queue, arguments, rule):
    assert rule in error_text(call("edit_image", {"prompt": "x", **arguments}))
    assert queue.recent(10) == []


def test_get_and_delete_are_refused_with_405_and_the_client_goes_on_without_a_stream(queue):
    """Stateless, the server never sends on a GET stream: refused, it holds no thread."""
    for method in ("get", "delete"):
        refused = getattr(DjangoClient(), method)("/mcp", HTTP_ACCEPT="text/event-stream")
        assert refused.status_code == 405, refused.content
        assert refused["Allow"] == "POST"
        assert "allowed: POST" in refused.json()["error"]["message"]
    assert {tool.name for tool in session(lambda client: client.list_tools()).tools} == TOOLS


@pytest.fixture
def one_waiter_place(settings) -> Iterator[None]:
    """SYNC_WAITERS_MAX 1, its places made anew for the test and again after it."""
    settings.SYNC_WAITERS_MAX = 1
    places._waiter_places.cache_clear()
    yield
    places._waiter_places.cache_clear()


def test_a_waiting_call_holds_a_sync_waiter_place_and_past_the_bound_is_refused(
    queue, one_waiter_place
):
    """A tool call that waits counts against SYNC_WAITERS_MAX as any synchronous request:
    its place is held for the whole wait, and the next is refused at once, nothing queued."""
    queue.submit(GenerationRequest(prompt="mcp blocker", steps=400, size=(64, 64)))
    waiting = threading.Thread(
        target=call, args=("generate_image", {"prompt": "mcp waiter", "size": "64x64"})
    )
    waiting.start()
    try:
        deadline = time.monotonic() + 60
        while not [job for job in queue.recent(10) if job.parameters.prompt == "mcp waiter"]:
            assert time.monotonic() < deadline
            time.sleep(0.05)
        with pytest.raises(SyncWaitersBusy), places.sync_waiter_place():
            pass  # the waiting call holds the one place
        text = error_text(call("generate_image", {"prompt": "mcp refused", "size": "64x64"}))
        assert "SYNC_WAITERS_MAX" in text and "retry in 5 s" in text, text
        assert text.endswith(WAIT_FALSE), text
        assert not [job for job in queue.recent(10) if job.parameters.prompt == "mcp refused"]
        queued = call("generate_image", {"prompt": "mcp unwaited", "size": "64x64",
                                         "wait": False})  # fmt: skip
        assert not queued.is_error, queued.content  # not waiting, it needs no place
    finally:
        for job in queue.recent(10):
            with contextlib.suppress(ServiceError):
                queue.cancel(job.id)
        waiting.join(60)
    with places.sync_waiter_place():  # given back when the wait ended
        pass


def test_a_waited_edit_past_gen_sync_timeout_leaves_no_input_stored(queue, settings):
    settings.GEN_SYNC_TIMEOUT = 2
    settings.GEN_SYNC_REFUSE_FACTOR = 0
    blocker = queue.submit(GenerationRequest(prompt="mcp blocker", steps=400, size=(64, 64)))
    picture = io.BytesIO()
    Image.fromarray(np.full((64, 64, 3), 70, np.uint8)).save(picture, format="PNG")
    sent = base64.b64encode(picture.getvalue()).decode()
    text = error_text(call("edit_image", {"prompt": "mcp late edit", "image": sent}))
    assert "No image within GEN_SYNC_TIMEOUT" in text, text
    inputs = backend.current_backend().images.root / "inputs"
    assert not inputs.exists() or list(inputs.iterdir()) == []
    queue.cancel(blocker.id)


def test_the_bridge_is_made_once_by_threads_asking_at_once(monkeypatch):
    monkeypatch.setattr(mcp_tools, "_made", None)
    before = set(threading.enumerate())
    barrier = threading.Barrier(6)
    made: list[Any] = []

    def ask() -> None:
        barrier.wait()
        made.append(mcp_tools.bridge(PATH))

    askers = [threading.Thread(target=ask) for _ in range(6)]
    for asker in askers:
        asker.start()
    for asker in askers:
        asker.join(60)
    assert len(made) == 6 and len({id(bridge) for bridge in made}) == 1
    # Its one event loop thread (the set, not a count: another test's thread may end meanwhile).
    started = set(threading.enumerate()) - before - set(askers)
    assert len(started) == 1, started


class _FailingApp:
    """An ASGI app whose lifespan startup fails."""

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        await receive()
        await send({"type": "lifespan.startup.failed", "message": "no start"})


def test_a_failed_bridge_start_fails_each_request_alike_without_a_new_thread(monkeypatch):
    class Server:
        def streamable_http_app(self, **_: Any) -> _FailingApp:
            return _FailingApp()

    monkeypatch.setattr(mcp_tools, "_made", None)
    monkeypatch.setattr(mcp_tools, "build_server", Server)
    before = threading.active_count()
    for _ in range(3):
        with pytest.raises(LifespanFailed, match="no start"):
            mcp_tools.bridge(PATH)
    deadline = time.monotonic() + 10  # the failed start's loop thread ends
    while threading.active_count() > before:
        assert time.monotonic() < deadline
        time.sleep(0.05)


# A web process's first requests, then its first MCP call, each followed by whether the MCP SDK
# and the tools are imported by then.
FIRST_REQUESTS_THEN_MCP = """
import json, sys
import django
django.setup()
from django.test import Client
client = Client()
seen = []
for path in ("/health", "/todos", "/sdapi/v1/sd-models"):
    client.get(path)
    seen.append("mcp" in sys.modules or "imagegen.api.mcp_tools" in sys.modules)
answer = client.post("/mcp", data='{"jsonrpc": "2.0", "id": 1, "method": "ping"}',
                     content_type="application/json",
                     HTTP_ACCEPT="application/json, text/event-stream")
seen.append("mcp" in sys.modules and "imagegen.api.mcp_tools" in sys.modules)
print(json.dumps([answer.status_code, seen]))
"""


def test_a_web_process_imports_the_mcp_sdk_only_with_its_first_mcp_call(tmp_path):
    """The SDK and its types are a third of a web process's imports before its first answer:
    every replica, worker and command start paid them for a route most never serve."""
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "config.settings", "SECRET_KEY": "t",
           "ALLOWED_HOSTS": "testserver", "MODEL_DIR": str(tmp_path / "share"),
           "PRELOAD_MODEL_CODE": "0"}  # fmt: skip
    run = subprocess.run(
        [sys.executable, "-c", FIRST_REQUESTS_THEN_MCP],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr[-2000:]
    status, seen = json.loads(run.stdout.splitlines()[-1])
    assert status == 200 and seen == [False, False, False, True], run.stdout
