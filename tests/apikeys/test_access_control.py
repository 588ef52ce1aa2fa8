"""API_TOKEN: writes and compute need the bearer token; probes and reads stay open. The token
is checked per request: one closed service served in this process (served_here, on the
session's database) answers every refusal (a refused request changes nothing); the accepted
pull, which starts the model's download, gets a service of its own. The warning an open
service logs at its start: tests/config/test_cross_site.py, on the session's gunicorn."""

from collections.abc import Iterator
from pathlib import Path

import pytest
import requests

from scripts.embedded_mongo import EmbeddedMongo
from tests.support.in_process import LoopbackApp, served_here, todos_here
from tests.support.local_hub import LocalHub
from tests.support.model_service import model_service_env, wait_for_state

TOKEN = "s3cret-token"


@pytest.fixture(scope="module")
def closed(
    hub_root: Path, mongo: EmbeddedMongo, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[LoopbackApp]:
    work = tmp_path_factory.mktemp("closed")
    (work / "share").mkdir()
    with LocalHub(hub_root) as hub:
        env = {
            **model_service_env(hub.url, work / "share", work),
            "API_TOKEN": TOKEN,
            "MONGODB_URI": mongo.uri(),
        }
        # The todo routes' database connected as a start connects it; the app served is
        # served_here's (todos_here's own loopback is not used).
        with served_here(**env) as server, todos_here(mongo.uri()):
            yield server


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


@pytest.mark.parametrize("headers", [{}, bearer("wrong"), {"Authorization": TOKEN}])
def test_pull_and_generate_need_the_token(closed, headers):
    app = closed
    for path, data in [("/model/pull", None), ("/generate", {"prompt": "x"})]:
        response = requests.post(app.url(path), data=data, headers=headers)
        assert response.status_code == 401
        assert response.headers["WWW-Authenticate"] == "Bearer"
        assert "Bearer" in response.json()["error"]["message"]
    assert requests.get(app.url("/model/status")).json()["state"] == "not_started"


@pytest.mark.parametrize("path", ["/jobs", "/jobs/abc", "/images", "/images/abc"])
def test_jobs_and_images_need_the_token(closed, path):
    app = closed
    assert requests.get(app.url(path)).status_code == 401
    assert requests.get(app.url(path), headers=bearer(TOKEN)).status_code in (200, 404)


def test_probes_and_status_stay_open(closed):
    app = closed
    assert requests.get(app.url("/health")).status_code == 200
    assert requests.get(app.url("/model/status")).status_code == 200
    index = requests.get(app.url("/api")).json()  # a closed service does not warn
    assert index["open"] is False and index["warning"] is None


def test_the_right_token_is_accepted(model_env):
    with served_here(**model_env, API_TOKEN=TOKEN) as app:
        response = requests.post(app.url("/model/pull"), headers=bearer(TOKEN))
        assert response.status_code == 202
        wait_for_state(app, {"ready", "failed"})  # the pull this process runs ends here


def test_todo_writes_need_the_token_and_answer_in_the_envelope(closed):
    app = closed
    todo = {"todo": {"title": "guarded"}}
    refused = requests.post(app.url("/todo"), json=todo)
    assert refused.status_code == 401
    assert refused.json()["data"] is None and "Bearer" in refused.json()["error"]["message"]
    for method, path in [
        ("PATCH", "/todos"),
        ("DELETE", "/todos"),
        ("DELETE", "/todo/" + "0" * 24),
    ]:
        assert (
            requests.request(method, app.url(path), json={"todos": [todo["todo"]]}).status_code
            == 401
        )
    assert requests.get(app.url("/todos")).status_code == 200

    created = requests.post(app.url("/todo"), json=todo, headers=bearer(TOKEN))
    assert created.status_code == 201
    todo_id = created.json()["data"]["id"]
    assert requests.get(app.url(f"/todo/{todo_id}")).status_code == 200
    assert requests.delete(app.url(f"/todo/{todo_id}"), headers=bearer(TOKEN)).status_code == 202
