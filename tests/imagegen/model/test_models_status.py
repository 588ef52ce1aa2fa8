"""GET /model/status's `models` and POST /model/pull's `model`: every offered model's state,
a pull of one by name, the memory rule's swap as the status shows it. In process
(served_here), with MODEL_ID the tiny SD model and MODELS the tiny SDXL one."""

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests

from tests.support.distributed import replica_here
from tests.support.in_process import LoopbackApp, served_here
from tests.support.local_hub import LocalHub
from tests.support.model_service import SD_REPO, SDXL_REPO, model_service_env


@pytest.fixture
def app(hub_root: Path, tmp_path: Path) -> Iterator[LoopbackApp]:
    with LocalHub(hub_root) as hub:
        env = model_service_env(hub.url, tmp_path / "share", tmp_path)
        with served_here(**env, MODELS=SDXL_REPO) as served:
            yield served


def status(app: LoopbackApp) -> dict:
    answer = requests.get(app.url("/model/status"), timeout=30)
    assert answer.status_code == 200, answer.text
    return answer.json()


def entries(app: LoopbackApp) -> dict[str, dict]:
    return {entry["id"]: entry for entry in status(app)["models"]}


def wait_until(app: LoopbackApp, model_id: str, state: str, timeout: float = 60) -> dict:
    deadline = time.monotonic() + timeout
    while (entry := entries(app)[model_id])["state"] != state:
        assert entry["state"] != "failed", entry
        assert time.monotonic() < deadline, entry
        time.sleep(0.05)
    return entry


def pull(app: LoopbackApp, **how) -> requests.Response:
    return requests.post(app.url("/model/pull"), timeout=30, **how)


def test_status_lists_every_offered_model_and_a_pull_by_name_loads_that_one(app):
    before = status(app)
    assert [m["id"] for m in before["models"]] == [SD_REPO, SDXL_REPO]
    default, sdxl = before["models"]
    assert default == {
        "id": SD_REPO, "revision": "main", "default": True, "state": "not_started",
        "weights_on_share": False, "resident": False,
        "preset": {"name": None, "steps": 2, "guidance": 7.0, "scheduler": None,
                   "max_steps": None, "max_guidance": None, "native_size": None},
    }  # fmt: skip
    assert sdxl["default"] is False and sdxl["state"] == "not_started"
    assert sdxl["preset"]["steps"] == 20  # not MODEL_ID's GEN_DEFAULT_STEPS

    assert pull(app, params={"model": "tiny-sdxl"}).status_code == 202
    loaded = wait_until(app, SDXL_REPO, "ready")
    assert loaded["weights_on_share"] and loaded["resident"]
    assert loaded["preset"]["native_size"] == [64, 64]
    after = status(app)
    # The top level is MODEL_ID's, untouched by another model's pull.
    assert (after["state"], after["weights_on_share"], after["model_id"]) == (
        "not_started", False, SD_REPO,
    )  # fmt: skip
    assert after["models"][0]["state"] == "not_started"
    assert pull(app, data={"model": SDXL_REPO}).status_code == 200  # ready already


def test_an_unknown_model_is_a_400_naming_the_field_and_nothing_starts(app):
    refused = pull(app, data={"model": "dall-e-3"})
    assert refused.status_code == 400
    assert refused.json()["error"]["message"] == (
        f"Invalid request: model: 'dall-e-3' is not offered; offered: {SD_REPO}, {SDXL_REPO}"
    )
    assert {m["state"] for m in status(app)["models"]} == {"not_started"}


def test_a_model_freed_for_another_is_not_started_with_its_weights_on_the_share(app):
    """Room for one model (the limit the process read at its start, made small): loading
    the default frees the other, and loading that one again frees the default, whose
    top-level state returns to not_started too."""
    app.backend.shelf.limit = 1
    assert pull(app, params={"model": SDXL_REPO}).status_code == 202
    wait_until(app, SDXL_REPO, "ready")
    assert pull(app).status_code == 202  # the default's pull, no body: unchanged
    wait_until(app, SD_REPO, "ready")
    freed = entries(app)[SDXL_REPO]
    assert (freed["state"], freed["weights_on_share"], freed["resident"]) == (
        "not_started", True, False,
    )  # fmt: skip
    assert pull(app, params={"model": SDXL_REPO}).status_code == 202
    wait_until(app, SDXL_REPO, "ready")
    top = status(app)
    assert (top["state"], top["weights_on_share"]) == ("not_started", True)
    assert top["models"][0]["resident"] is False


def test_in_distributed_mode_the_offered_models_are_listed_and_another_pull_downloads_it(
    hub_root, tmp_path, redis_server
):
    """A web replica of distributed mode (no worker needed): the default's entry is the
    workers' (the top level), another model is not_started with no worker holding it, and a
    pull of it downloads it onto the share here, for the workers that may run it to load
    (tests/imagegen/distributed/test_models_distributed.py)."""
    with LocalHub(hub_root) as hub:
        env = model_service_env(hub.url, tmp_path / "share", tmp_path)
        with replica_here(**env, JOB_BROKER_URL=redis_server.url, MODELS=SDXL_REPO) as app:
            top = status(app)
            assert "workers" in top  # distributed mode's answer
            default, sdxl = top["models"]
            assert (default["id"], default["state"]) == (SD_REPO, top["state"])
            assert (sdxl["id"], sdxl["state"], sdxl["resident"]) == (
                SDXL_REPO, "not_started", False,
            )  # fmt: skip
            assert pull(app, params={"model": "tiny-sdxl"}).status_code == 202
            deadline = time.monotonic() + 60
            while not entries(app)[SDXL_REPO]["weights_on_share"]:
                assert time.monotonic() < deadline, entries(app)[SDXL_REPO]
                time.sleep(0.05)
            assert entries(app)[SDXL_REPO]["state"] == "not_started"  # no worker loads it
            assert pull(app, params={"model": "nope"}).status_code == 400


def test_a_json_body_names_the_model_as_a_form_does(app):
    # Read, not ignored: {"model": ...} must not pull the default instead.
    refused = pull(app, json={"model": "dall-e-3"})
    assert refused.status_code == 400, refused.text
    assert refused.json()["error"]["message"].startswith("Invalid request: model: 'dall-e-3'")
    wrong = pull(app, json={"model": 5})
    assert wrong.status_code == 400 and "must be a string" in wrong.text
    assert all(entry["state"] == "not_started" for entry in status(app)["models"])
