"""The gallery card's Upscale button in a real browser against the app served here (tiny
pipeline, no UPSCALERS: the default upscaler is Lanczos): the stored image is upscaled twice
over as a job of the Queue panel, and the result leads the gallery, its card saying what ran."""

import requests
from playwright.sync_api import expect

from tests.imagegen.ui.conftest import WAIT_MS, screenshot
from tests.imagegen.ui.test_page import open_ui

PROMPT = "a harbour to upscale"


def test_upscale_on_a_card_queues_a_job_whose_image_then_leads_the_gallery(new_page, ui_app):
    made = requests.post(
        ui_app.url("/generate"), data={"prompt": PROMPT, "size": "64x64", "steps": "1"}, timeout=120
    )
    assert made.status_code == 200, made.text
    page = open_ui(new_page, ui_app)
    card = page.locator(f'#gallery li[data-image-id="{made.headers["X-Image-Id"]}"]')
    card.get_by_role("button", name=f"Upscale 2x: {PROMPT}").click()
    first = page.locator("#gallery li").first
    expect(first.locator(".params")).to_contain_text("128x128", timeout=WAIT_MS)
    expect(first.locator(".params")).to_contain_text("upscaled 2x with Lanczos")
    expect(first.locator(".prompt")).to_have_text(PROMPT)  # the source's own parameters
    expect(page.locator("#gallery-status")).to_have_text("")
    expect(page.locator("#queue li")).to_have_count(0, timeout=WAIT_MS)
    screenshot(page, "upscaled")
    upscaled = first.get_attribute("data-image-id")
    record = requests.get(ui_app.url(f"/images/{upscaled}"), timeout=30).json()
    assert record["parameters"]["upscale"]["source_image"] == made.headers["X-Image-Id"]
    assert (record["parameters"]["width"], record["parameters"]["height"]) == (128, 128)
