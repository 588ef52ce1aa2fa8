"""The page's LoRAs in a real browser, with MODEL_ID the tiny SD model (pulled, its LORAS with
it), MODELS the tiny SDXL one (pulled from the page) and LORAS a LoRA of each: the list shows
the LoRAs that fit the chosen model and follows the picker and a pull, says when none fits,
adds a tag at the prompt's cursor or in place of a selection and finds a file dropped into
MODEL_DIR/loras/; each card and the larger view
show the LoRAs an image ran with and their weights, and "Use these settings" keeps them in
the prompt. One page load."""

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests
from PIL import Image
from playwright.sync_api import Page, expect

from imagegen.generation.images import GenerationParameters, LoraRan, png_bytes
from tests.imagegen.ui.conftest import WAIT_MS, UiApp, pulled_app, screenshot, served_to
from tests.support.model_service import SD_REPO, SDXL_REPO
from tests.support.tiny_adapters import (
    KOHYA_FILE,
    LORA_REPO,
    PEFT_FILE,
    SDXL_FILE,
    build_adapter_repos,
)

LORAS = f"{LORA_REPO}:{KOHYA_FILE}=style, {LORA_REPO}:{SDXL_FILE}=xl"
SAVED = "a saved lighthouse"


@pytest.fixture(scope="module")
def _loras_app(
    ui_server: str, hub_root: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[UiApp]:
    build_adapter_repos(hub_root, sd_repo=SD_REPO, sdxl_repo=SDXL_REPO)
    work = tmp_path_factory.mktemp("ui-loras-app")
    with pulled_app(ui_server, hub_root, work, LORAS=LORAS, MODELS=SDXL_REPO) as app:
        yield app


@pytest.fixture
def loras_app(new_page, _loras_app: UiApp) -> Iterator[UiApp]:
    with served_to(new_page, _loras_app) as app:
        yield app


def save_image_with_a_lora_its_prompt_does_not_name(app: UiApp) -> None:
    """An image whose LoRA came in a request's fields rather than a tag in its prompt, stored
    as the service stores every image (its store, its record)."""
    assert app.backend is not None
    parameters = GenerationParameters(
        prompt=SAVED, negative_prompt=None, steps=2, guidance=5.0, width=64, height=64, seed=3,
        scheduler="Euler a", model_id=SD_REPO, revision=None, lora_hashes="style: 0123456789ab",
        loras=(LoraRan(name="style", weight=0.5),),
    )  # fmt: skip
    png = png_bytes(Image.new("RGB", (64, 64), "navy"), parameters)
    app.backend.images.save(png, parameters, device="cpu", timings={})


def card(page: Page, prompt: str):
    return page.locator("#gallery li").filter(has=page.get_by_text(prompt, exact=True))


def offered(page: Page):
    return page.locator("#lora-list li .lora-name")


def test_the_lora_list_adds_a_tag_and_each_card_shows_the_loras_it_ran(
    new_page, loras_app, hub_root
):
    save_image_with_a_lora_its_prompt_does_not_name(loras_app)
    page = new_page()
    page.goto(loras_app.url("/ui/"))

    # The SD model's LoRA alone: the SDXL one fits no model on the share yet.
    expect(offered(page)).to_have_text(["style"])
    expect(page.locator("#lora-empty")).to_have_text("")
    # The stored image's card and its larger view say the LoRA it ran and its weight.
    saved = card(page, SAVED)
    expect(saved.locator(".loras")).to_have_text("LoRAs: style at 0.5")

    # Add puts the tag at the cursor, spaced from the words on each side.
    page.fill("#prompt", "a red cube")
    page.press("#prompt", "End")
    for _ in range(len(" cube")):
        page.press("#prompt", "ArrowLeft")
    page.get_by_role("button", name="Add style to the prompt").click()
    prompt = "a red <lora:style:1> cube"
    expect(page.locator("#prompt")).to_have_value(prompt)
    expect(page.locator("#prompt")).to_be_focused()
    screenshot(page, "41-lora-list")

    # The list follows the picker: the SDXL model is not on the share, so nothing fits it
    # yet; once Pull brings it, its LoRA is listed.
    page.select_option("#model", SDXL_REPO)
    expect(page.locator("#lora-list")).to_be_hidden()
    expect(page.locator("#lora-empty")).to_have_text(
        "No offered LoRA fits this model. Those that fit it show once it is downloaded."
    )
    page.get_by_role("button", name=f"Pull {SDXL_REPO}").click()
    pulled = page.locator(f'#model-list li[data-model-id="{SDXL_REPO}"] .model-entry-state')
    expect(pulled).to_have_text("loaded", timeout=WAIT_MS)
    expect(offered(page)).to_have_text(["xl"], timeout=60_000)  # its fit read on a loaded host
    expect(page.locator("#lora-empty")).to_have_text("")
    page.select_option("#model", SD_REPO)
    expect(offered(page)).to_have_text(["style"])

    # A file an operator drops is offered once the page has the service look for it.
    model_dir = Path(loras_app.env["MODEL_DIR"])
    shutil.copy(hub_root / LORA_REPO / PEFT_FILE, model_dir / "loras" / "dropped.safetensors")
    page.get_by_role("button", name="Look for new LoRA files").click()
    expect(offered(page)).to_have_text(["style", "dropped"])
    # A selection is replaced by the tag.
    page.press("#prompt", "End")
    for _ in range(len("cube")):
        page.press("#prompt", "Shift+ArrowLeft")
    page.get_by_role("button", name="Add dropped to the prompt").click()
    prompt = "a red <lora:style:1> <lora:dropped:1>"
    expect(page.locator("#prompt")).to_have_value(prompt)

    # The image made with the tag: its card says the LoRA and the weight it ran at.
    page.fill("#steps", "2")
    page.fill("#size", "64x64")
    page.click("#generate")
    made = card(page, prompt)
    expect(made).to_have_count(1, timeout=WAIT_MS)
    expect(made.locator(".loras")).to_have_text("LoRAs: style at 1, dropped at 1")
    (record,) = [r for r in requests.get(loras_app.url("/images"), timeout=60).json()["items"]
                 if r["parameters"]["prompt"] == prompt]  # fmt: skip
    assert record["parameters"]["loras"] == [
        {"name": "style", "weight": 1.0},
        {"name": "dropped", "weight": 1.0},
    ]
    made.locator(".view").click()
    expect(page.locator("#viewer-loras")).to_have_text("LoRAs: style at 1, dropped at 1")
    screenshot(page, "42-lora-card-view")
    page.click("#viewer-close")

    # "Use these settings" keeps the LoRAs: the tag written stays; one sent apart is added.
    saved.get_by_role("button", name=f"Use these settings: {SAVED}").click()
    expect(page.locator("#prompt")).to_have_value(f"{SAVED} <lora:style:0.5>")
    made.get_by_role("button", name=f"Use these settings: {prompt}").click()
    expect(page.locator("#prompt")).to_have_value(prompt)
