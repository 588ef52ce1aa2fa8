"""The page's model picker in a real browser, with MODEL_ID the tiny SD model and MODELS the
tiny SDXL one (an app of each test's own, on a fresh share, served by the package's loopback
server): every offered model listed with its state, Pull on one, a generation with the second
model named on its queue entry and its card, the choice kept across a reload, and the form's
hints following the chosen model's preset: its defaults, caps and scheduler."""

import re
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import requests
from django.test import override_settings
from playwright.sync_api import Page, expect

from imagegen.backend import build_backend
from tests.imagegen.ui.conftest import WAIT_MS, UiApp, app_env, screenshot, served_to
from tests.support.in_process import settings_for
from tests.support.local_hub import LocalHub
from tests.support.model_service import SD_REPO, SDXL_REPO, model_service_env

# Runs until cancelled (as test_page.py's): it holds the one runner while a job waits.
LONG = {"prompt": "a long one", "steps": "400", "size": "256x256", "async": "true"}


@pytest.fixture
def models_app(new_page, ui_server: str, hub_root: Path, tmp_path: Path) -> Iterator[UiApp]:
    """Two offered models, neither on the share yet."""
    with offering(new_page, ui_server, hub_root, tmp_path, SDXL_REPO) as app:
        yield app


@contextmanager
def offering(new_page, ui_server: str, hub_root: Path, work: Path, models: str) -> Iterator[UiApp]:
    """An app of its own offering MODEL_ID and `models` (MODELS), served for the test."""
    with LocalHub(hub_root) as hub:
        env = {**model_service_env(hub.url, work / "share", work), **app_env(),
               "MODELS": models}  # fmt: skip
        with override_settings(**settings_for(env)):
            built = build_backend()
        app = UiApp(ui_server, built, env)
        try:
            with served_to(new_page, app):
                yield app
        finally:
            for job in built.jobs.unfinished():
                built.jobs.cancel(job.id)


def entries(app: UiApp) -> dict[str, dict]:
    status = requests.get(app.url("/model/status"), timeout=60).json()
    return {entry["id"]: entry for entry in status["models"]}


def pulled(app: UiApp, model: str) -> dict:
    """`model` pulled through the API and loaded."""
    answer = requests.post(app.url("/model/pull"), data={"model": model}, timeout=60)
    assert answer.status_code in (200, 202), answer.text
    deadline = time.monotonic() + WAIT_MS / 1000
    while (entry := entries(app)[model])["state"] != "ready":
        assert entry["state"] != "failed" and time.monotonic() < deadline, entry
        time.sleep(0.1)
    return entry


def open_ui(new_page, app: UiApp) -> Page:
    page = new_page()
    page.goto(app.url("/ui/"))
    expect(page.locator("#model-list li")).to_have_count(2)
    return page


def listed(page: Page, model: str):
    return page.locator(f'#model-list li[data-model-id="{model}"]')


def test_the_picker_lists_every_offered_model_with_its_state_and_pulls_one(new_page, models_app):
    page = open_ui(new_page, models_app)
    expect(page.locator("#model option")).to_have_text(
        [f"{SD_REPO} (not downloaded)", f"{SDXL_REPO} (not downloaded)"]
    )
    expect(page.locator("#model")).to_have_value(SD_REPO)  # MODEL_ID's first
    for model in (SD_REPO, SDXL_REPO):
        expect(listed(page, model).locator(".model-entry-state")).to_have_text("not downloaded")
    screenshot(page, "31-models-listed")

    page.get_by_role("button", name=f"Pull {SDXL_REPO}").click()
    expect(listed(page, SDXL_REPO).locator(".model-entry-state")).to_have_text(
        "loaded", timeout=WAIT_MS
    )
    expect(page.get_by_role("button", name=f"Pull {SDXL_REPO}")).to_be_disabled()
    expect(page.locator("#model option").nth(1)).to_have_text(f"{SDXL_REPO} (loaded)")
    # The other model is untouched, and the Model panel still speaks of the chosen one.
    expect(listed(page, SD_REPO).locator(".model-entry-state")).to_have_text("not downloaded")
    expect(page.locator("#model-id")).to_have_text(SD_REPO)
    expect(page.locator("#model-state")).to_have_text("not_started")
    assert entries(models_app)[SDXL_REPO]["resident"]
    screenshot(page, "32-model-pulled")


def test_a_generation_with_the_second_model_names_it_in_the_queue_and_on_its_card(
    new_page, models_app
):
    pulled(models_app, SD_REPO)
    pulled(models_app, SDXL_REPO)
    page = open_ui(new_page, models_app)
    # MODEL_ID's job runs first, so the page's job waits in the queue where it can be read.
    long = requests.post(models_app.url("/generate"), data=LONG, timeout=60)
    assert long.status_code == 202, long.text
    page.select_option("#model", SDXL_REPO)
    page.fill("#prompt", "a second model's harbour")
    page.fill("#steps", "2")
    page.fill("#size", "64x64")
    page.click("#generate")
    waiting = page.locator("#queue li").filter(
        has=page.get_by_text("a second model's harbour", exact=True)
    )
    expect(waiting.locator(".job-model")).to_have_text(f"Model: {SDXL_REPO}")
    other = page.locator("#queue li").filter(has=page.get_by_text(LONG["prompt"], exact=True))
    expect(other.locator(".job-model")).to_have_text(f"Model: {SD_REPO}")  # it named none
    screenshot(page, "33-queue-names-models")

    requests.delete(models_app.url(f"/jobs/{long.json()['id']}"), timeout=60)
    card = page.locator("#gallery li").first
    expect(card.locator(".prompt")).to_have_text("a second model's harbour", timeout=WAIT_MS)
    expect(card.locator(".model")).to_have_text(f"Model: {SDXL_REPO}")
    (image,) = [r for r in requests.get(models_app.url("/images"), timeout=60).json()["items"]
                if r["parameters"]["prompt"] == "a second model's harbour"]  # fmt: skip
    assert image["parameters"]["model_id"] == SDXL_REPO  # the model that ran, as the card says
    screenshot(page, "34-card-names-model", full_page=True)


def test_the_choice_survives_a_reload_and_the_hints_follow_its_preset(new_page, models_app):
    sdxl = pulled(models_app, SDXL_REPO)["preset"]
    sd = entries(models_app)[SD_REPO]["preset"]
    assert (sd["steps"], sdxl["steps"]) == (3, 20)  # GEN_DEFAULT_STEPS is MODEL_ID's alone
    page = open_ui(new_page, models_app)
    expect(page.locator("#hint-steps")).to_have_text("1 to 500. Empty: 3.")
    expect(page.locator("#steps")).to_have_attribute("placeholder", "3")
    expect(page.locator("#size")).to_have_attribute("placeholder", "model's native")

    page.select_option("#model", SDXL_REPO)
    expect(page.locator("#hint-steps")).to_have_text("1 to 500. Empty: 20.")
    expect(page.locator("#steps")).to_have_attribute("placeholder", "20")
    guidance = f"{sdxl['guidance']:.1f}" if sdxl["guidance"] % 1 == 0 else str(sdxl["guidance"])
    expect(page.locator("#guidance")).to_have_attribute("placeholder", guidance)
    expect(page.locator("#hint-guidance")).to_contain_text(f"Empty: {guidance}.")
    expect(page.locator("#size")).to_have_attribute("placeholder", "native 64x64")  # on the share
    expect(page.locator("#hint-size")).to_contain_text("Empty: the model's native size (64x64).")
    # The Model panel follows the choice: its Pull is this model's.
    expect(page.locator("#model-id")).to_have_text(SDXL_REPO)
    expect(page.locator("#model-state")).to_have_text("ready")

    page.reload()
    expect(page.locator("#model")).to_have_value(SDXL_REPO)
    expect(page.locator("#hint-steps")).to_have_text("1 to 500. Empty: 20.")
    expect(page.locator("#model-id")).to_have_text(SDXL_REPO)
    screenshot(page, "35-choice-kept")

    page.select_option("#model", SD_REPO)
    expect(page.locator("#hint-steps")).to_have_text(re.compile(r"Empty: 3\.$"))
    expect(page.locator("#size")).to_have_attribute("placeholder", "model's native")


def test_with_one_model_offered_the_picker_shows_it_and_no_list(new_page, ui_app):
    """The package's app offers MODEL_ID alone: the picker says what Generate runs; the
    Model panel has its state and Pull, so no list repeats them. It offers no LoRA either,
    and the LoRA list says so."""
    page = new_page()
    page.goto(ui_app.url("/ui/"))
    expect(page.locator("#model option")).to_have_text([f"{SD_REPO} (loaded)"])
    expect(page.locator("#model-list li")).to_have_count(1)  # listed, and not shown
    expect(page.locator("#model-list")).to_be_hidden()
    expect(page.locator("#model-state")).to_have_text("ready")
    # No LORAS and no file dropped: the LoRA list says so.
    expect(page.locator("#lora-list")).to_be_hidden()
    expect(page.locator("#lora-empty")).to_have_text(
        "No LoRA is offered (LORAS, or .safetensors files dropped into MODEL_DIR/loras/ and "
        "then \u201cLook for new LoRA files\u201d)."
    )


# Recognised by its id for its preset (a one-step recipe, its steps capped): the page reads the
# preset from /model/status, so the model need not be on the share (nor on the test hub).
TURBO = "stabilityai/sdxl-turbo"


def test_the_hints_say_the_chosen_presets_caps_and_scheduler(
    new_page, ui_server, hub_root, tmp_path
):
    with offering(new_page, ui_server, hub_root, tmp_path, TURBO) as app:
        page = open_ui(new_page, app)
        expect(page.locator("#hint-steps")).to_have_text("1 to 500. Empty: 3.")
        page.select_option("#model", TURBO)
        expect(page.locator("#hint-steps")).to_have_text(
            "1 to 500; above 4 lowered to 4. Empty: 1."
        )
        expect(page.locator("#hint-guidance")).to_have_text(
            "0 to 30; above 1.0 lowered to 1.0. Empty: 0.0."
        )
        expect(page.locator("#hint-scheduler")).to_have_text("Model preset: turbo.")
        expect(page.locator("#scheduler option").first).to_have_text(
            "Default (Euler a SGM Uniform)"
        )
        screenshot(page, "36-preset-caps")
