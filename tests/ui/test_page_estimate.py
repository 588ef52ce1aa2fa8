"""The estimate beside Generate, in a real browser against the app under gunicorn (tiny
pipeline): before anything is sent the page says how long the form's settings would take
now, and for settings past the limit the very message a synchronous request of them gets
(its 400), from the app's own measurements."""

import re

import requests
from playwright.sync_api import expect

from tests.ui.conftest import WAIT_MS, screenshot


def test_the_page_shows_the_estimate_and_a_refused_requests_message_before_generate(
    new_page, ui_app
):
    measured = {"prompt": "measured for the page", "size": "64x64", "steps": "2"}
    made = requests.post(ui_app.url("/generate"), data=measured, timeout=WAIT_MS / 1000)
    assert made.status_code == 200, made.text
    page = new_page()
    page.goto(ui_app.url("/ui/"))
    estimate = page.locator("#estimate")
    page.fill("#steps", "2")
    page.fill("#size", "64x64")
    expect(estimate).to_have_text(re.compile(r"^About \d+ s \(2 steps at 64x64: "), timeout=WAIT_MS)

    # GEN_SYNC_TIMEOUT is 230 s here: 500 steps at 1,024 times the pixels are far past it.
    too_long = {"steps": "500", "size": "2048x2048"}
    page.fill("#steps", too_long["steps"])
    page.fill("#size", too_long["size"])
    told = requests.get(ui_app.url("/generate/estimate"), params=too_long, timeout=60).json()
    assert told["refused"] is True
    expect(estimate).to_have_text(told["message"], timeout=WAIT_MS)
    expect(estimate).to_contain_text("async=true")
    screenshot(page, "10-estimate-refused")
    synchronous = requests.post(
        ui_app.url("/generate"), data={"prompt": "refused", **too_long}, timeout=60
    )
    assert synchronous.status_code == 400
    assert synchronous.json()["error"]["message"] == told["message"]
