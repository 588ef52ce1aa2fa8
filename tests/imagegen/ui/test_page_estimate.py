"""The estimate beside Generate, in a real browser against the app served here (tiny
pipeline): before anything is sent the page says how long the form's settings would take
now; for settings past a synchronous request's limit, that the page queues them (it sends
every request asynchronously), not the advice a synchronous client gets; the estimate follows
the queue (no jobs ahead once they ended) and the first image (measured, no longer counted);
and an edit is estimated at its image's size and its strength's steps."""

import re
from pathlib import Path

import pytest
import requests
from playwright.sync_api import expect

from tests.imagegen.ui.conftest import WAIT_MS, pulled_app, screenshot, served_to
from tests.imagegen.ui.test_page_edit import choose, source_png


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
    assert told["refused"] is True and "async=true" in told["message"]
    # The page queues it: it says so, not a synchronous client's advice.
    queued = f"{told['about']}. Too long to wait for, so Generate queues it: follow it in the"
    expect(estimate).to_contain_text(queued, timeout=WAIT_MS)
    expect(estimate).not_to_contain_text("async=true")
    expect(estimate).not_to_contain_text("refused")
    screenshot(page, "10-estimate-refused")
    synchronous = requests.post(
        ui_app.url("/generate"), data={"prompt": "refused", **too_long}, timeout=60
    )
    assert synchronous.status_code == 400
    assert synchronous.json()["error"]["message"] == told["message"]


def test_the_estimate_follows_the_queue_ended_jobs_are_no_longer_ahead(new_page, ui_app):
    """Opened behind two long jobs, the page counts them ahead; once they are cancelled it
    says so no more, without any field touched."""
    measured = {"prompt": "measured for the queue", "size": "64x64", "steps": "2"}
    assert requests.post(ui_app.url("/generate"), data=measured, timeout=120).status_code == 200
    long = {"prompt": "a long job ahead", "size": "512x512", "steps": "500", "async": "true"}
    ahead = [requests.post(ui_app.url("/generate"), data=long, timeout=60) for _ in range(2)]
    assert all(job.status_code == 202 for job in ahead), [job.text for job in ahead]
    try:
        page = new_page()
        page.goto(ui_app.url("/ui/"))  # the form's defaults: no field touched, none re-asks
        estimate = page.locator("#estimate")
        expect(estimate).to_contain_text("3 steps at 64x64", timeout=WAIT_MS)
        expect(estimate).to_contain_text("for the jobs ahead")
    finally:
        for job in ahead:
            requests.delete(ui_app.url(f"/jobs/{job.json()['id']}"), timeout=60)
    expect(estimate).to_have_text(re.compile(r"^About \d+ s \(3 steps at 64x64: "), timeout=WAIT_MS)
    expect(estimate).not_to_contain_text("for the jobs ahead", timeout=WAIT_MS)


def test_jobs_ahead_that_end_before_the_pages_first_queue_listing_leave_no_count(new_page, ui_app):
    """The estimate counted two jobs ahead, and they ended before the page's first listing of
    the queue answered (held here until then, as a slow answer would be): that listing, though
    it shows nothing the page had seen under way, asks the estimate again."""
    measured = {"prompt": "measured for the held listing", "size": "64x64", "steps": "2"}
    assert requests.post(ui_app.url("/generate"), data=measured, timeout=120).status_code == 200
    long = {"prompt": "a long job, ended unseen", "size": "512x512", "steps": "500",
            "async": "true"}  # fmt: skip
    ahead = [requests.post(ui_app.url("/generate"), data=long, timeout=60) for _ in range(2)]
    assert all(job.status_code == 202 for job in ahead), [job.text for job in ahead]
    held: list = []
    released = False

    def hold(route) -> None:  # the listings until released; later ones pass at once
        if released:
            route.continue_()
        else:
            held.append(route)

    page = new_page()
    page.route("**/jobs?unfinished=*", hold)
    try:
        page.goto(ui_app.url("/ui/"))
        estimate = page.locator("#estimate")
        expect(estimate).to_contain_text("for the jobs ahead", timeout=WAIT_MS)
    finally:
        for job in ahead:
            requests.delete(ui_app.url(f"/jobs/{job.json()['id']}"), timeout=60)
    for _ in range(300):  # the page's first listing, asked at its load, held since
        if held:
            break
        page.wait_for_timeout(100)
    assert held, "the page asked for no listing"
    for job in ahead:  # ended, not only asked to stop: the held listing will show neither
        url = ui_app.url(f"/jobs/{job.json()['id']}")
        for _ in range(600):
            if requests.get(url, timeout=60).json()["state"] == "cancelled":
                break
            page.wait_for_timeout(100)
    assert requests.get(ui_app.url("/jobs?unfinished=true"), timeout=60).json() == []
    released = True
    for route in held:
        route.continue_()
    expect(estimate).not_to_contain_text("for the jobs ahead", timeout=30_000)


def test_an_edit_is_estimated_at_its_images_size_and_its_strengths_steps(new_page, ui_app):
    """256x192 at strength 0.5 of 8 steps: 4 steps at 256x192 (the size left empty), what
    GET /generate/estimate says of that edit, its input's encode included."""
    page = new_page()
    page.goto(ui_app.url("/ui/"))
    choose(page, source_png(256, 192))
    page.fill("#steps", "8")
    page.fill("#strength", "0.5")
    edit = {"steps": "8", "strength": "0.5", "image_size": "256x192"}
    told = requests.get(ui_app.url("/generate/estimate"), params=edit, timeout=60).json()
    assert (told["steps"], told["size"]) == (4, "256x192"), told
    estimate = page.locator("#estimate")
    expect(estimate).to_contain_text("4 steps at 256x192", timeout=WAIT_MS)
    expect(estimate).to_have_text(told["about"], timeout=WAIT_MS)
    page.get_by_role("button", name="Remove image").click()
    expect(estimate).to_contain_text("8 steps at", timeout=WAIT_MS)


@pytest.fixture
def fresh_app(new_page, ui_server: str, hub_root: Path, tmp_path: Path):
    """An app of its own: nothing measured in it yet."""
    work = tmp_path / "fresh-app"
    work.mkdir()
    with pulled_app(ui_server, hub_root, work) as app, served_to(new_page, app):
        yield app


def test_after_the_first_image_the_estimate_is_the_measured_one(fresh_app, new_page):
    """Before any image the page shows the model's counted work; once its first image is
    made, the measured figures, without any field touched."""
    page = new_page()
    page.goto(fresh_app.url("/ui/"))
    page.fill("#steps", "2")
    page.fill("#size", "64x64")
    estimate = page.locator("#estimate")
    expect(estimate).to_contain_text("nothing measured yet", timeout=WAIT_MS)
    page.fill("#prompt", "the first image")
    page.get_by_role("button", name="Generate").click()
    expect(page.locator("#gallery img").first).to_be_visible(timeout=WAIT_MS)
    expect(estimate).to_have_text(re.compile(r"^About \d+ s \(2 steps at 64x64: "), timeout=WAIT_MS)
    expect(estimate).not_to_contain_text("nothing measured yet", timeout=WAIT_MS)
