"""What one named key may hold of what every key shares, in both job modes: at most
KEY_QUEUE_SHARE % of GEN_QUEUE_MAX queued or running (counted in the step that queues each
job, the Lua script's in distributed mode) and at most KEY_STREAMS_MAX event streams; other
keys still get theirs. And a key's limits are checked before an edit's images are read."""

import base64
import io
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests
from PIL import Image

from apikeys import services
from scripts.embedded_mongo import EmbeddedMongo
from tests.support.in_process_app import in_process_app
from tests.support.key_database import connected_database
from tests.support.mcp_client import call_tool
from tests.support.model_service import MODES
from tests.support.processes import AppServer
from tests.support.sse import open_stream
from tests.support.xdist_schedule import stack_of

LONG = {"prompt": "a long one", "steps": "400", "size": "64x64", "async": "1"}


@pytest.fixture(scope="module")
def secrets(mongo: EmbeddedMongo) -> Iterator[dict[str, str]]:
    with connected_database(mongo, "key-shares") as uri:
        made = {
            "frank": services.key_create(name="frank").secret,
            "gina": services.key_create(name="gina").secret,
            "hugo": services.key_create(name="hugo", max_queued=1).secret,
            "root": services.key_create(name="root", admin=True).secret,
        }
        yield {**made, "uri": uri}


@pytest.fixture(scope="module", params=MODES)
def app(
    request: pytest.FixtureRequest,
    secrets: dict[str, str],
    hub_root: Path,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[AppServer]:
    env = {
        "API_KEYS": "1",
        "API_TOKEN": "shares-token",
        "MONGODB_URI": secrets["uri"],
        "GEN_MAX_STEPS": "500",
        "GEN_QUEUE_MAX": "4",
        "KEY_QUEUE_SHARE": "50",  # 2 of the 4
        "EVENT_STREAMS_MAX": "3",
        "KEY_STREAMS_MAX": "1",
    }
    work = tmp_path_factory.mktemp(f"key-shares-{request.param}")
    if request.param == "distributed":  # the session's stack, its model pulled already
        with stack_of(request).replica(work / "web.log", **env) as web:
            yield web
        return
    # In process: this process's app on a loopback port, its MongoEngine on the module's
    # database already (secrets).
    overrides = {"API_KEYS": True, "API_TOKEN": "shares-token", "GEN_MAX_STEPS": 500,
                 "GEN_QUEUE_MAX": 4, "KEY_QUEUE_SHARE": 50, "EVENT_STREAMS_MAX": 3,
                 "KEY_STREAMS_MAX": 1}  # fmt: skip
    with in_process_app(hub_root, work, **overrides) as served:
        yield served


def as_(secret: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {secret}"}


@pytest.fixture
def started(app: AppServer, secrets: dict[str, str]) -> Iterator[list[str]]:
    """The ids of the jobs a test starts; each cancelled, by the admin, when it ends."""
    ids: list[str] = []
    yield ids
    for job_id in ids:
        requests.delete(app.url(f"/jobs/{job_id}"), headers=as_(secrets["root"]), timeout=30)
    for job_id in ids:
        deadline = time.monotonic() + 60
        while requests.get(
            app.url(f"/jobs/{job_id}"), headers=as_(secrets["root"]), timeout=30
        ).json()["state"] in ("queued", "running"):
            assert time.monotonic() < deadline
            time.sleep(0.05)


def submit(app: AppServer, secret: str, started: list[str]) -> requests.Response:
    answer = requests.post(app.url("/generate"), data=LONG, headers=as_(secret), timeout=30)
    if answer.status_code == 202:
        started.append(answer.json()["id"])
    return answer


def test_a_key_holds_at_most_its_share_of_the_queue(
    app: AppServer, secrets: dict[str, str], started: list[str]
):
    assert [submit(app, secrets["frank"], started).status_code for _ in range(2)] == [202, 202]
    refused = submit(app, secrets["frank"], started)
    assert refused.status_code == 429, refused.text
    assert refused.headers["Retry-After"] == "5"
    assert "may have 2 generations queued or running" in refused.json()["error"]["message"]
    assert submit(app, secrets["gina"], started).status_code == 202  # another key's place
    # A key's own --max-queued below its share still holds.
    assert submit(app, secrets["hugo"], started).status_code == 202
    assert submit(app, secrets["hugo"], started).status_code == 429


def test_the_token_is_not_held_to_a_keys_share(
    app: AppServer, secrets: dict[str, str], started: list[str]
):
    answers = [submit(app, "shares-token", started).status_code for _ in range(3)]
    assert answers == [202, 202, 202]


def test_a_key_holds_at_most_key_streams_max_event_streams(
    app: AppServer, secrets: dict[str, str], started: list[str]
):
    frank = submit(app, secrets["frank"], started).json()["id"]
    gina = submit(app, secrets["gina"], started).json()["id"]
    first = open_stream(app.url(f"/jobs/{frank}/events"), headers=as_(secrets["frank"]))
    try:
        assert first.status_code == 200
        second = requests.get(
            app.url(f"/jobs/{frank}/events"), headers=as_(secrets["frank"]), timeout=30
        )
        assert second.status_code == 503, second.text
        assert second.headers["Retry-After"] == "5"
        assert "KEY_STREAMS_MAX" in second.json()["error"]["message"]
        other = open_stream(app.url(f"/jobs/{gina}/events"), headers=as_(secrets["gina"]))
        assert other.status_code == 200  # another key's stream opens
        other.close()
    finally:
        first.close()
    deadline = time.monotonic() + 30  # closed, its place is given back
    while (
        again := open_stream(app.url(f"/jobs/{frank}/events"), headers=as_(secrets["frank"]))
    ).status_code != 200:
        again.close()
        assert time.monotonic() < deadline
        time.sleep(0.2)
    again.close()


def _gif() -> bytes:
    buffer = io.BytesIO()
    Image.new("RGB", (64, 64)).save(buffer, format="GIF")
    return buffer.getvalue()


def _png() -> bytes:
    buffer = io.BytesIO()
    Image.new("RGB", (64, 64), (20, 90, 160)).save(buffer, format="PNG")
    return buffer.getvalue()


def test_a_key_past_its_limit_is_refused_before_its_images_are_read(
    app: AppServer, secrets: dict[str, str], started: list[str]
):
    """Admission comes first: a key past its limits gets its 429 without its images being
    decoded (a GIF, which reading would refuse with a 400, shows which came first)."""
    assert submit(app, secrets["hugo"], started).status_code == 202  # its --max-queued 1
    gif, hugo = _gif(), as_(secrets["hugo"])
    answers = [
        requests.post(app.url("/generate"), data={"prompt": "an edit"},
                      files={"image": ("in.gif", gif)}, headers=hugo, timeout=30),
        requests.post(app.url("/v1/images/edits"), data={"prompt": "an edit"},
                      files={"image": ("in.gif", gif)}, headers=hugo, timeout=30),
        requests.post(app.url("/sdapi/v1/img2img"), headers=hugo, timeout=30,
                      json={"prompt": "an edit", "init_images": [base64.b64encode(gif).decode()]}),
    ]  # fmt: skip
    assert [answer.status_code for answer in answers] == [429, 429, 429], [
        answer.text for answer in answers
    ]
    # The MCP tool too, and an edit it would take leaves no input stored.
    inputs = Path(app.env["OUTPUT_DIR"]) / "inputs"
    stored = set(inputs.iterdir()) if inputs.exists() else set()
    for picture in (gif, _png()):
        sent = {"prompt": "an edit", "image": base64.b64encode(picture).decode()}
        result, _ = call_tool(app.url("/mcp"), hugo, "edit_image", sent)
        text = " ".join(block.text for block in result.content if block.type == "text")
        assert result.is_error and "may have 1 generation" in text, text
    assert (set(inputs.iterdir()) if inputs.exists() else set()) == stored
    # Within its limits, the same GIF is read, and refused naming the field.
    gina = requests.post(
        app.url("/generate"), data={"prompt": "an edit"}, files={"image": ("in.gif", gif)},
        headers=as_(secrets["gina"]), timeout=30,
    )  # fmt: skip
    assert gina.status_code == 400
    assert gina.json()["error"]["details"][0]["field"] == "image"
