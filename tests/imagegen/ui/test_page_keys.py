"""The page with named API keys (API_KEYS=1) in a real browser: an admin key's page shows
whose each job and image is ("by <key name>") in the Queue panel and the gallery; a key that
is not an admin sees only its own and is shown no such label."""

import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests
from playwright.sync_api import Page, expect

from apikeys import services
from scripts.embedded_mongo import EmbeddedMongo
from tests.imagegen.ui.conftest import TOKEN, WAIT_MS, UiApp, pulled_app, screenshot, served_to
from tests.imagegen.ui.test_page import queued
from tests.support.key_database import connected_database
from tests.support.processes import AppServer


@pytest.fixture(scope="module")
def keys(mongo: EmbeddedMongo) -> Iterator[dict[str, str]]:
    """alice, bob and root (an admin) in a database of the module's; its URI under "uri"."""
    with connected_database(mongo, "ui_keys") as uri:
        made = {
            name: services.key_create(name=name, admin=name == "root").secret
            for name in ("alice", "bob", "root")
        }
        yield {**made, "uri": uri}


@pytest.fixture(scope="module")
def _keys_app(
    keys: dict[str, str], ui_server: str, hub_root: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[UiApp]:
    # API_TOKEN as well: pulled_app pulls the model with it.
    work = tmp_path_factory.mktemp("ui-keys-app")
    env = {"API_KEYS": "1", "MONGODB_URI": keys["uri"], "API_TOKEN": TOKEN}
    with pulled_app(ui_server, hub_root, work, **env) as app:
        yield app


@pytest.fixture
def keys_app(new_page, _keys_app: UiApp) -> Iterator[UiApp]:
    with served_to(new_page, _keys_app) as app:
        yield app


def as_(secret: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {secret}"}


def submit(app: AppServer, secret: str, **fields: str) -> str:
    sent = requests.post(
        app.url("/generate"), data={**fields, "async": "1"}, headers=as_(secret), timeout=60
    )
    assert sent.status_code == 202, sent.text
    return sent.json()["id"]


def wait_state(app: AppServer, secret: str, job_id: str, states: set[str]) -> dict:
    deadline = time.monotonic() + WAIT_MS / 1000
    while (job := requests.get(app.url(f"/jobs/{job_id}"), headers=as_(secret)).json())[
        "state"
    ] not in states:
        assert time.monotonic() < deadline, job
        time.sleep(0.1)
    return job


def open_as(new_page, app: AppServer, secret: str) -> Page:
    page = new_page()
    page.goto(app.url("/ui/"))
    page.fill("#token", secret)
    page.keyboard.press("Enter")
    expect(page.locator("#token-dialog")).to_be_hidden()
    expect(page.locator("#model-state")).to_have_text("ready")
    return page


def card(page: Page, prompt: str):
    return page.locator("#gallery li").filter(has=page.get_by_text(prompt, exact=True))


def test_an_admins_page_shows_whose_each_job_and_image_is_and_a_keys_own_page_does_not(
    new_page, keys_app: AppServer, keys: dict[str, str]
) -> None:
    run = uuid.uuid4().hex[:6]
    alices, bobs = f"alice holds {run}", f"bob waits {run}"
    # alice's job runs long; bob's waits behind it: both are in the Queue panel a while.
    alice_job = submit(keys_app, keys["alice"], prompt=alices, steps="500", size="256x256")
    bob_job = submit(keys_app, keys["bob"], prompt=bobs, steps="2", size="64x64")
    try:
        admin = open_as(new_page, keys_app, keys["root"])
        expect(queued(admin, alices).locator(".owner")).to_have_text("by alice")
        expect(queued(admin, bobs).locator(".owner")).to_have_text("by bob")
        screenshot(admin, "keys-admin-queue")
        # bob's own page: his job, no label; alice's job is not his to see.
        own = open_as(new_page, keys_app, keys["bob"])
        expect(queued(own, bobs)).to_have_count(1)
        expect(queued(own, bobs).locator(".owner")).to_be_hidden()
        expect(queued(own, alices)).to_have_count(0)
    finally:
        requests.delete(keys_app.url(f"/jobs/{alice_job}"), headers=as_(keys["alice"]))
    assert wait_state(keys_app, keys["bob"], bob_job, {"succeeded", "failed"})["state"] == (
        "succeeded"
    )
    # Seen under way, bob's image joins each page's gallery from the job: labelled for the
    # admin only.
    expect(card(admin, bobs).locator(".owner")).to_have_text("by bob", timeout=WAIT_MS)
    expect(card(own, bobs)).to_have_count(1, timeout=WAIT_MS)
    expect(card(own, bobs).locator(".owner")).to_be_hidden()
    # And from the gallery's own listing (GET /images) after a reload, alice's made too.
    made = submit(keys_app, keys["alice"], prompt=f"alice made {run}", steps="2", size="64x64")
    wait_state(keys_app, keys["alice"], made, {"succeeded"})
    admin.reload()
    expect(card(admin, bobs).locator(".owner")).to_have_text("by bob")
    expect(card(admin, f"alice made {run}").locator(".owner")).to_have_text("by alice")
    screenshot(admin, "keys-admin-gallery")
    own.reload()
    expect(card(own, bobs).locator(".owner")).to_be_hidden()
    expect(card(own, f"alice made {run}")).to_have_count(0)
