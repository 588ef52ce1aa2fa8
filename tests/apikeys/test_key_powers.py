"""What each kind of key may call, route by route, in process (the app on a loopback
port) with API_TOKEN and named keys on: an ordinary key every route but the admin's own
(pulling the model, /metrics, deleting every todo: 403), a key of --scope metrics /metrics
alone, an admin everything; and the deployment gate's pull, made with API_TOKEN, passes with
keys on (docs/keys.md)."""

import re
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests

from apikeys import services
from scripts.embedded_mongo import EmbeddedMongo
from tests.support.commands import manage
from tests.support.in_process_app import LoopbackApp, in_process_app
from tests.support.key_database import connected_database, in_one_minute
from tests.support.model_service import wait_for_state

TOKEN = "the-api-token-of-the-environment"
# What an ordinary key may not call (docs/keys.md, "What a key may call").
ADMIN_ROUTES = {("POST", "/model/pull"), ("GET", "/metrics"), ("DELETE", "/todos")}
# Path parameters: ids of nothing, so each route answers past its door without touching data.
PLACEHOLDERS = {"digest": "0" * 64, "todo_id": "0" * 24}


def every_route() -> list[tuple[str, str]]:
    """Each method and path the API routes (those left out of the schema too), its path
    parameters filled with ids of nothing: read from the routers, so a new route is swept."""
    from config.urls import api

    found = set()
    for prefix, router in api._routers:
        for path, view in router.path_operations.items():
            full = re.sub(r"/+", "/", f"/{prefix}/{path}")
            full = re.sub(r"\{(\w+)\}", lambda m: PLACEHOLDERS.get(m.group(1), "x" * 12), full)
            for operation in view.operations:
                found |= {(method, full) for method in operation.methods}
    return sorted(found)


@pytest.fixture(scope="module")
def secrets(mongo: EmbeddedMongo) -> Iterator[dict[str, str]]:
    with connected_database(mongo, "powers") as uri:
        made = {
            "alice": services.key_create(name="alice").secret,
            "root": services.key_create(name="root", admin=True).secret,
            "prometheus": services.key_create(name="prometheus", scope="metrics").secret,
        }
        yield {**made, "uri": uri}


@pytest.fixture(scope="module")
def app(
    secrets: dict[str, str], hub_root: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[LoopbackApp]:
    """The model not pulled yet (the gate pulls it); every key made without its own limit
    has KEY_DEFAULT_PER_MINUTE's (no test here generates but the frank keys)."""
    work = tmp_path_factory.mktemp("powers")
    with in_process_app(hub_root, work, pulled=False, API_KEYS=True, API_TOKEN=TOKEN,
                        KEY_DEFAULT_PER_MINUTE=1) as served:  # fmt: skip
        yield served


def call(app: LoopbackApp, method: str, path: str, secret: str | None) -> requests.Response:
    headers = {"Authorization": f"Bearer {secret}"} if secret else {}
    return requests.request(method, app.url(path), headers=headers, timeout=30)


def test_an_ordinary_key_may_call_every_route_but_the_admins(
    app: LoopbackApp, secrets: dict[str, str]
) -> None:
    routes = every_route()
    assert set(routes) >= ADMIN_ROUTES
    for method, path in routes:
        answer = call(app, method, path, secrets["alice"])
        if (method, path) in ADMIN_ROUTES:
            assert answer.status_code == 403, (method, path, answer.status_code)
            assert "may not call this route: it needs an admin key" in answer.text
        else:
            assert answer.status_code not in (401, 403), (method, path, answer.status_code)


def test_a_metrics_key_reads_metrics_and_nothing_that_needs_a_key(
    app: LoopbackApp, secrets: dict[str, str]
) -> None:
    scraped = requests.get(
        app.url("/metrics"), headers={"Authorization": f"Bearer {secrets['prometheus']}"}
    )
    assert scraped.status_code == 200 and "imagegen_" in scraped.text
    for method, path in every_route():
        if path == "/metrics":
            continue
        anonymous = call(app, method, path, None).status_code
        answer = call(app, method, path, secrets["prometheus"]).status_code
        # A route open to anyone stays open; one that needs a key refuses this one.
        assert answer == (403 if anonymous == 401 else anonymous), (method, path, answer)


def test_the_gate_pulls_with_api_token_while_keys_are_on_and_admins_may_pull(
    app: LoopbackApp, secrets: dict[str, str]
) -> None:
    """The contract's deployment order: the gate's pull is made with API_TOKEN (an admin)."""
    fast = ["--interval", "0.2", "--health-timeout", "20", "--timeout", "90"]
    refused = manage("gate", "--base-url", app.base_url, *fast, "--token", secrets["alice"])
    assert refused.returncode == 12 and "answered 403" in refused.stderr, refused.stderr
    passed = manage("gate", "--base-url", app.base_url, *fast, env={"API_TOKEN": TOKEN})
    assert passed.returncode == 0, passed.stderr
    root = {"Authorization": f"Bearer {secrets['root']}"}
    assert requests.post(app.url("/model/pull"), headers=root, timeout=30).status_code == 200
    assert requests.get(app.url("/metrics"), headers=root, timeout=30).status_code == 200
    deleted = requests.delete(app.url("/todos"), headers=root, timeout=30)
    assert deleted.status_code == 202, deleted.text


def test_server_paths_are_whole_to_admins_and_relative_to_the_share_to_other_keys(
    app: LoopbackApp, secrets: dict[str, str]
) -> None:
    """/sdapi/v1/sd-models' filename; /model/status' model_path keeps the contract's shape."""
    model_path = requests.get(app.url("/model/status"), timeout=30).json()["model_path"]
    assert model_path.startswith("/") and model_path.endswith("testorg--tiny-sd")

    def filename(secret: str) -> str:
        answer = requests.get(app.url("/sdapi/v1/sd-models"), auth=("webui", secret), timeout=30)
        return answer.json()[0]["filename"]

    assert filename(TOKEN) == filename(secrets["root"]) == model_path
    assert filename(secrets["alice"]) == "testorg--tiny-sd"


def test_a_key_made_without_limits_has_the_deployments_default(
    app: LoopbackApp, secrets: dict[str, str]
) -> None:
    """KEY_DEFAULT_PER_MINUTE=1 in the service's environment: frank, made with no limit of
    its own, may start one image a minute; API_TOKEN is never limited."""
    root = {"Authorization": f"Bearer {secrets['root']}"}
    assert requests.post(app.url("/model/pull"), headers=root, timeout=30).status_code in (200, 202)
    assert wait_for_state(app, {"ready", "failed"}, 120)["state"] == "ready"
    job = {"prompt": "frank", "size": "64x64", "steps": "2"}

    def spend(n: int) -> tuple[bool, requests.Response]:
        """A fresh key made with no limit of its own: its first image, then its second's."""
        made = services.key_create(name=f"frank-{uuid.uuid4().hex[:8]}").secret
        frank = {"Authorization": f"Bearer {made}"}
        first = requests.post(app.url("/generate"), data=job, headers=frank, timeout=120)
        return first.ok, requests.post(app.url("/generate"), data=job, headers=frank, timeout=120)

    first_ok, again = in_one_minute(spend)  # the whole try inside one minute's window
    assert first_ok
    assert again.status_code == 429 and "1 images a minute" in again.text, again.text
    token = {"Authorization": f"Bearer {TOKEN}"}
    for _ in range(2):
        assert requests.post(app.url("/generate"), data=job, headers=token, timeout=120).ok
