"""The page at /ui/ in a real browser against the app under gunicorn (tiny pipeline): generate
with live progress and see the image, find it first in the gallery and reuse its settings,
cancel a job mid-run (only that one), a refused field's message beside it, one event stream
and no polling, resuming a stream without losing or repeating a step, and a phone-width
screen where every control stays usable."""

import json
import re
import time

import requests
from playwright.sync_api import Page, Request, expect

from tests.support.processes import AppServer
from tests.ui.conftest import TOKEN, WAIT_MS, screenshot

LONG = {"prompt": "a long one", "steps": "400", "size": "64x64"}


def open_ui(new_page, app: AppServer, **viewport: int) -> Page:
    page = new_page(**viewport)
    page.goto(app.url("/ui/"))
    expect(page.locator("#model-state")).to_have_text("ready")
    return page


def fill(page: Page, **fields: str) -> None:
    for name, value in fields.items():
        if name == "scheduler":
            page.select_option(f"#{name}", value)
        else:
            page.fill(f"#{name}", value)


def jobs(app: AppServer, prompt: str) -> list[dict]:
    headers = {"Authorization": f"Bearer {TOKEN}"}  # ignored by the open app
    found = requests.get(app.url("/jobs"), params={"limit": 200}, headers=headers, timeout=30)
    found = found.json()
    return [job for job in found if job["parameters"]["prompt"] == prompt]


def cancel_unfinished(app: AppServer) -> None:
    for job in requests.get(app.url("/jobs"), params={"limit": 200}, timeout=10).json():
        if job["state"] in ("queued", "running"):
            requests.delete(app.url(f"/jobs/{job['id']}"), timeout=10)


def progress_mid_run(page: Page) -> None:
    page.wait_for_function(
        "() => { const p = document.getElementById('job-progress');"
        " return p.value >= 1 && p.value < p.max; }",
        timeout=WAIT_MS,
    )


def test_generate_shows_progress_then_the_image_which_leads_the_gallery(new_page, ui_app):
    page = open_ui(new_page, ui_app)
    screenshot(page, "01-empty")
    fill(page, prompt="a lighthouse in fog", steps="20", size="64x64", seed="4242",
         guidance="6.5", scheduler="euler_a")  # fmt: skip
    page.click("#generate")
    progress_mid_run(page)
    expect(page.locator("#job-steps")).to_have_text(re.compile(r"^Step \d+ of 20\b"))
    expect(page.locator("#job-status")).to_contain_text(re.compile("Running|Queued"))
    screenshot(page, "02-progress")

    expect(page.locator("#job-status")).to_contain_text("Done in", timeout=WAIT_MS)
    expect(page.locator("#job-status")).to_contain_text("seed 4242")
    image = page.locator("#result-image")
    expect(image).to_be_visible()
    assert image.get_attribute("src").startswith("blob:")
    assert page.evaluate("document.getElementById('result-image').naturalWidth") == 64
    assert page.locator("#job-progress").evaluate("p => p.value === p.max")
    screenshot(page, "03-done", full_page=True)

    done = jobs(ui_app, "a lighthouse in fog")[0]
    image_id = done["image"]["id"]
    first = page.locator("#gallery li").first
    expect(first).to_have_attribute("data-image-id", image_id)
    expect(first.locator(".prompt")).to_have_text("a lighthouse in fog")
    expect(first.locator(".params")).to_contain_text(
        "64x64 · 20 steps · guidance 6.5 · seed 4242 · sampler Euler a"  # A1111's name
    )
    expect(first.locator(".download")).to_have_attribute("download", f"{image_id}.png")

    # A fresh page finds it first too, from the stored images (newest first).
    fresh = open_ui(new_page, ui_app)
    fresh_first = fresh.locator("#gallery li").first
    expect(fresh_first).to_have_attribute("data-image-id", image_id)
    expect(fresh_first.locator("img")).to_have_attribute("src", re.compile("^blob:"))
    with fresh.expect_download() as download:
        fresh_first.locator(".download").click()
    saved = download.value.path().read_bytes()
    png = requests.get(ui_app.url(f"/images/{image_id}.png"), timeout=10).content
    assert saved == png
    fresh_first.locator(".reuse").click()
    values = {name: fresh.input_value(f"#{name}") for name in
              ("prompt", "steps", "guidance", "size", "seed", "scheduler")}  # fmt: skip
    assert values == {"prompt": "a lighthouse in fog", "steps": "20", "guidance": "6.5",
                      "size": "64x64", "seed": "4242", "scheduler": "euler_a"}  # fmt: skip
    expect(fresh.locator("#prompt")).to_be_focused()
    screenshot(fresh, "04-gallery", full_page=True)


def submit(app: AppServer, **fields: str) -> str:
    answer = requests.post(app.url("/generate"), data={**fields, "async": "true"}, timeout=30)
    assert answer.status_code == 202, answer.text
    return answer.json()["id"]


def wait_state(app: AppServer, job_id: str, states: set[str]) -> dict:
    deadline = time.monotonic() + WAIT_MS / 1000
    while (job := requests.get(app.url(f"/jobs/{job_id}"), timeout=30).json())["state"] not in (
        states
    ):
        assert time.monotonic() < deadline, job
        time.sleep(0.1)
    return job


def test_a_second_job_shows_its_queue_position_and_cancel_stops_it_mid_run_alone(new_page, ui_app):
    page = open_ui(new_page, ui_app)
    fill(page, prompt="first, finished", steps="2", size="64x64")
    page.click("#generate")
    expect(page.locator("#job-status")).to_contain_text("Done in", timeout=WAIT_MS)

    ahead = submit(ui_app, **LONG, seed="1")  # another client's job runs first
    wait_state(ui_app, ahead, {"running"})
    fill(page, prompt="the second, cancelled", steps=LONG["steps"], size=LONG["size"])
    page.click("#generate")
    expect(page.locator("#job-status")).to_have_text("Queued: position 1")
    behind = submit(ui_app, prompt="another client", steps="2", size="64x64")
    screenshot(page, "05-queued")
    requests.delete(ui_app.url(f"/jobs/{ahead}"), timeout=30)
    progress_mid_run(page)
    expect(page.locator("#cancel")).to_be_enabled()
    screenshot(page, "06-before-cancel")
    page.click("#cancel")
    expect(page.locator("#job-status")).to_have_text("Cancelled", timeout=WAIT_MS)
    expect(page.locator("#cancel")).to_be_disabled()
    screenshot(page, "07-cancelled")

    cancelled = jobs(ui_app, "the second, cancelled")[0]
    assert cancelled["state"] == "cancelled"
    assert 1 <= cancelled["progress"]["step"] < cancelled["progress"]["steps"]
    assert jobs(ui_app, "first, finished")[0]["state"] == "succeeded"
    assert wait_state(ui_app, behind, {"succeeded", "failed", "cancelled"})["state"] == (
        "succeeded"
    )


def test_a_refused_field_shows_the_apis_message_beside_it(new_page, ui_app):
    page = open_ui(new_page, ui_app)
    fill(page, prompt="bad bounds", steps="100000", size="65x64")
    with page.expect_response(re.compile(r"/generate$")) as answer:
        page.click("#generate")
    details = {d["field"]: d["message"] for d in answer.value.json()["error"]["details"]}
    assert answer.value.status == 400 and set(details) == {"steps", "size"}
    expect(page.locator("#error-steps")).to_have_text(details["steps"])
    expect(page.locator("#error-steps")).to_contain_text("500")  # GEN_MAX_STEPS, the API's own
    expect(page.locator("#error-size")).to_have_text(details["size"])
    expect(page.locator("#steps")).to_have_attribute("aria-invalid", "true")
    expect(page.locator("#steps")).to_be_focused()
    expect(page.locator("#error-prompt")).to_have_text("")
    screenshot(page, "08-refused-field")
    assert not jobs(ui_app, "bad bounds")  # nothing was queued

    fill(page, steps="2", size="64x64")
    page.click("#generate")
    expect(page.locator("#job-status")).to_contain_text("Done in", timeout=WAIT_MS)
    expect(page.locator("#error-steps")).to_have_text("")
    assert page.get_attribute("#steps", "aria-invalid") is None
    # The seed it got (random: the field was empty) comes back with "Reuse last".
    assert page.input_value("#seed") == ""
    page.click("#seed-reuse")
    assert page.input_value("#seed") == str(jobs(ui_app, "bad bounds")[0]["parameters"]["seed"])
    page.click("#seed-random")
    assert page.input_value("#seed") == ""


def test_the_network_log_shows_one_event_stream_and_no_polling(new_page, token_ui_app):
    """On an app with the default stream life (and a token, given to the tab beforehand)."""
    page = new_page()
    page.context.add_init_script(f"sessionStorage.setItem('imagegen.token', '{TOKEN}')")
    page.goto(token_ui_app.url("/ui/"))
    expect(page.locator("#model-state")).to_have_text("ready")
    page.wait_for_load_state("networkidle")
    sent: list[Request] = []
    page.on("request", lambda request: sent.append(request))
    fill(page, prompt="watched on the wire", steps="6", size="64x64")
    # Until the page's last request (networkidle, once reached above, is not waited for again).
    with page.expect_request(token_ui_app.url("/model/status"), timeout=WAIT_MS):
        page.click("#generate")
        expect(page.locator("#job-status")).to_contain_text("Done in", timeout=WAIT_MS)

    job_id = jobs(token_ui_app, "watched on the wire")[0]["id"]
    # Not the blob: URLs it makes, nor the estimates it asks for after edits and the submit.
    paths = [(r.method, r.url.removeprefix(token_ui_app.base_url)) for r in sent
             if r.url.startswith(token_ui_app.base_url)
             and "/generate/estimate" not in r.url]  # fmt: skip
    image_id = jobs(token_ui_app, "watched on the wire")[0]["image"]["id"]
    # One stream for the whole job, then the image; nothing asks for the job's state again.
    assert paths == [
        ("POST", "/generate"),
        ("GET", f"/jobs/{job_id}/events"),
        ("GET", f"/images/{image_id}.png"),
        ("GET", "/model/status"),  # once, after the job: the model may have been loaded
    ]


def test_a_resumed_stream_loses_and_repeats_no_step(new_page, ui_app):
    page = open_ui(new_page, ui_app)
    sent: list[Request] = []
    page.on("request", lambda r: r.url.endswith("/events") and sent.append(r))
    fill(page, prompt="outlives its streams", steps="24", size="128x128")
    page.click("#generate")
    expect(page.locator("#job-status")).to_contain_text("Done in", timeout=WAIT_MS)
    page.wait_for_load_state("networkidle")

    assert len(sent) >= 2, "the job did not outlive one stream: nothing was resumed"
    steps, last_id = [], None
    for request in sent:
        # Each resume names the last event the page received.
        assert request.headers.get("last-event-id") == last_id
        for block in request.response().text().split("\n\n"):
            fields = dict(line.split(": ", 1) for line in block.split("\n") if ": " in line)
            if "id" in fields:
                last_id = fields["id"]
            if fields.get("event") == "step":
                steps.append(json.loads(fields["data"])["step"])
    total = jobs(ui_app, "outlives its streams")[0]["progress"]["steps"]
    assert steps == list(range(steps[0], total + 1))
    assert page.locator("#job-progress").evaluate("p => p.value === p.max")


def test_every_control_is_usable_on_a_390px_wide_screen(new_page, ui_app):
    page = open_ui(new_page, ui_app, width=390, height=844)
    fill(page, prompt="on a phone", steps="2", size="64x64")
    page.click("#generate")
    expect(page.locator("#job-status")).to_contain_text("Done in", timeout=WAIT_MS)
    expect(page.locator("#gallery li").first.locator("img")).to_have_attribute(
        "src", re.compile("^blob:")
    )
    assert page.evaluate("document.documentElement.scrollWidth") <= 390  # no sideways scroll
    controls = page.locator("main input, main textarea, main select, main button:visible, main a")
    assert controls.count() >= 14
    for index in range(controls.count()):
        control = controls.nth(index)
        if not control.is_visible():
            continue
        control.scroll_into_view_if_needed()
        box = control.bounding_box()
        name = control.get_attribute("id") or control.inner_text()
        assert box and box["x"] >= 0 and box["x"] + box["width"] <= 390, (name, box)
        assert box["height"] >= 24, (name, box)  # big enough to tap
    # Every form control has a label a screen reader reads.
    for field in page.locator("#generate-form input, #generate-form textarea, select").all():
        label = page.locator(f"label[for='{field.get_attribute('id')}']")
        expect(label).to_have_count(1)
    expect(page.locator("#job-status")).to_have_attribute("aria-live", "polite")
    page.evaluate("window.scrollTo(0, 0)")
    screenshot(page, "09-phone", full_page=True)


def test_the_page_is_usable_by_keyboard_alone(new_page, ui_app):
    page = open_ui(new_page, ui_app)
    page.focus("#prompt")
    page.keyboard.type("typed, never clicked")
    order = []
    for _ in range(12):
        page.keyboard.press("Tab")
        order.append(page.evaluate("document.activeElement.id"))
    assert order[:3] == ["negative_prompt", "steps", "guidance"]
    assert "generate" in order
    page.focus("#steps")
    page.keyboard.type("2")
    page.focus("#generate")
    page.keyboard.press("Enter")
    expect(page.locator("#job-status")).to_contain_text("Done in", timeout=WAIT_MS)
    cancel_unfinished(ui_app)


def test_the_gallery_pages_with_the_cursor_newest_first(new_page, ui_app):
    page_size = 12  # the page's gallery page
    stored = requests.get(ui_app.url("/images"), params={"limit": 100}, timeout=30).json()
    for index in range(len(stored["items"]), page_size + 1):
        fields = {"prompt": f"filler {index}", "steps": "1", "size": "64x64"}
        made = requests.post(ui_app.url("/generate"), data=fields, timeout=WAIT_MS / 1000)
        assert made.status_code == 200, made.text
    newest = [
        r["id"] for r in requests.get(ui_app.url("/images"), params={"limit": 100}).json()["items"]
    ]
    page = open_ui(new_page, ui_app)
    items = page.locator("#gallery li")
    expect(items).to_have_count(page_size)
    more = page.locator("#gallery-more")
    expect(more).to_be_visible()
    more.click()
    expect(items).to_have_count(min(len(newest), 2 * page_size))
    shown = [items.nth(i).get_attribute("data-image-id") for i in range(items.count())]
    assert shown == newest[: len(shown)]
