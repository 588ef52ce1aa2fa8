"""The page at /ui/ in a real browser against the app served here (tiny pipeline): a job in
the Queue panel whose image then leads the gallery, where its settings can be reused; the
Queue panel keeping every job (the page's and other clients') across reloads, cancelling from
it, and ended jobs kept until dismissed; a refused field's message beside it; the queue
followed with one poll, never an event stream; a phone-width screen where every control stays
usable; the keyboard (Ctrl+Enter, a batch count); the gallery's pages."""

import re
import time

import requests
from playwright.sync_api import Locator, Page, Request, expect

from tests.imagegen.ui.conftest import TOKEN, WAIT_MS, screenshot
from tests.support.processes import AppServer

# Runs until cancelled: at 64x64 its 400 steps could end, on an idle core, before the test's
# Cancel reaches it (a Cancel after the end is answered 409, and the entry leaves).
LONG = {"prompt": "a long one", "steps": "400", "size": "256x256"}


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


def queued(page: Page, prompt: str) -> Locator:
    """The Queue panel's entry for the job of this prompt."""
    return page.locator("#queue li").filter(has=page.get_by_text(prompt, exact=True))


def done(page: Page, prompt: str) -> None:
    """Until the job of this prompt has left the Queue panel and leads the gallery."""
    first = page.locator("#gallery li").first
    expect(first.locator(".prompt")).to_have_text(prompt, timeout=WAIT_MS)
    expect(queued(page, prompt)).to_have_count(0)


def test_a_job_waits_in_the_queue_then_its_image_leads_the_gallery(new_page, ui_app):
    page = open_ui(new_page, ui_app)
    screenshot(page, "01-empty")
    fill(page, prompt="a lighthouse in fog", steps="3", size="64x64", seed="4242",
         guidance="6.5", scheduler="euler_a")  # fmt: skip
    page.click("#generate")
    expect(page.locator("#queue-status")).to_have_text(
        re.compile(r"^Done in [0-9.]+ s \(seed 4242\): a lighthouse in fog$"), timeout=WAIT_MS
    )
    done(page, "a lighthouse in fog")
    expect(page.locator("#queue-empty")).to_be_visible()

    finished = jobs(ui_app, "a lighthouse in fog")[0]
    image_id = finished["image"]["id"]
    first = page.locator("#gallery li").first
    expect(first).to_have_attribute("data-image-id", image_id)
    expect(first.locator("img")).to_have_attribute("src", re.compile("^blob:"))
    assert first.locator("img").evaluate("i => i.complete && i.naturalWidth") == 64
    expect(first.locator(".params")).to_contain_text(
        "64x64 · 3 steps · guidance 6.5 · seed 4242 · sampler Euler a"  # A1111's name
    )
    expect(first.locator(".download")).to_have_attribute("download", f"{image_id}.png")
    screenshot(page, "03-done", full_page=True)

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
    fresh.fill("#count", "2")
    fresh_first.locator(".reuse").click()
    values = {name: fresh.input_value(f"#{name}") for name in
              ("prompt", "steps", "guidance", "size", "seed", "scheduler")}  # fmt: skip
    assert values == {"prompt": "a lighthouse in fog", "steps": "3", "guidance": "6.5",
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


def test_the_queue_keeps_every_job_across_reloads_and_cancels_from_its_panel(new_page, ui_app):
    page = open_ui(new_page, ui_app)
    expect(page.get_by_role("region", name="Queue")).to_be_visible()
    other = submit(ui_app, **LONG, seed="1")  # another client's job (curl's) runs first
    wait_state(ui_app, other, {"running"})
    fill(page, prompt="mine, finished", steps="2", size="64x64")
    page.click("#generate")
    fill(page, prompt="mine, cancelled while waiting")
    page.click("#generate")  # a second Generate adds a job; it replaces none
    expect(queued(page, "mine, finished").locator(".job-state")).to_have_text("Queued: position 1")
    expect(queued(page, "mine, cancelled while waiting").locator(".job-state")).to_have_text(
        "Queued: position 2"
    )

    page.reload()
    items = page.get_by_role("region", name="Queue").locator("li")
    expect(items).to_have_count(3)  # the other client's too, in the order they run
    expect(items.nth(0).locator(".job-prompt")).to_have_text(LONG["prompt"])
    running = queued(page, LONG["prompt"])
    expect(running.locator(".job-steps")).to_have_text(
        re.compile(r"^Step [1-9]\d* of 400\b"), timeout=WAIT_MS
    )
    expect(running.locator(".job-state")).to_have_text("Running: denoising", timeout=WAIT_MS)
    waiting = queued(page, "mine, cancelled while waiting")
    expect(waiting.locator(".job-state")).to_have_text("Queued: position 2")
    screenshot(page, "02-queue")

    waiting.get_by_role("button", name="Cancel: mine, cancelled while waiting").click()
    expect(waiting.locator(".job-state")).to_have_text("Cancelled", timeout=WAIT_MS)
    # The keyboard's place moves from Cancel, now gone, to Dismiss.
    expect(
        waiting.get_by_role("button", name="Dismiss: mine, cancelled while waiting")
    ).to_be_focused()
    expect(queued(page, "mine, finished").locator(".job-state")).to_have_text("Queued: position 1")
    running.locator(".cancel").click()  # mid-run, and not the page's own job
    expect(running.locator(".job-state")).to_have_text("Cancelled", timeout=WAIT_MS)
    expect(running.locator(".dismiss")).to_be_focused()
    # The page's job runs next; its image reaches the gallery as it finishes.
    done(page, "mine, finished")
    screenshot(page, "05-cancelled", full_page=True)

    assert jobs(ui_app, "mine, finished")[0]["state"] == "succeeded"
    cancelled = jobs(ui_app, "mine, cancelled while waiting")[0]
    assert cancelled["state"] == "cancelled" and cancelled["started_at"] is None
    stopped = requests.get(ui_app.url(f"/jobs/{other}"), timeout=30).json()
    assert stopped["state"] == "cancelled"
    assert 1 <= stopped["progress"]["step"] < stopped["progress"]["steps"]

    # Ended jobs stay, across a reload too, until dismissed; a dismissal is remembered.
    page.reload()
    expect(items).to_have_count(2)
    expect(waiting.locator(".job-state")).to_have_text("Cancelled")
    waiting.locator(".dismiss").click()
    expect(waiting).to_have_count(0)
    expect(running.locator(".dismiss")).to_be_focused()  # the keyboard's place is kept
    page.reload()
    expect(running.locator(".job-state")).to_have_text("Cancelled")
    expect(items).to_have_count(1)


def test_the_form_is_kept_across_a_reload(new_page, ui_app):
    page = open_ui(new_page, ui_app)
    kept = {"prompt": "kept prompt", "negative_prompt": "kept negative", "steps": "7",
            "guidance": "3.5", "size": "128x128", "scheduler": "dpmpp_2m_karras",
            "seed": "99", "count": "3"}  # fmt: skip
    fill(page, **kept)
    page.reload()
    expect(page.locator("#model-state")).to_have_text("ready")
    assert {name: page.input_value(f"#{name}") for name in kept} == kept
    # A fresh tab of the same browser (the same localStorage) finds it too.
    other = page.context.new_page()
    other.goto(ui_app.url("/ui/"))
    expect(other.locator("#prompt")).to_have_value("kept prompt")
    other.close()


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
    done(page, "bad bounds")
    expect(page.locator("#error-steps")).to_have_text("")
    assert page.get_attribute("#steps", "aria-invalid") is None
    # The seed it got (random: the field was empty) comes back with "Reuse last".
    assert page.input_value("#seed") == ""
    page.click("#seed-reuse")
    assert page.input_value("#seed") == str(jobs(ui_app, "bad bounds")[0]["parameters"]["seed"])
    page.click("#seed-random")
    assert page.input_value("#seed") == ""


def test_a_fields_message_goes_when_the_field_changes_and_the_next_answer_replaces_it(
    new_page, ui_app
):
    """A message is about the value refused: a new value takes it away (the other field's
    stays), and the next refusal's message is the only one shown."""
    page = open_ui(new_page, ui_app)
    fill(page, prompt="fixed field", steps="100000", size="13x7")
    page.click("#generate")
    expect(page.locator("#error-size")).to_contain_text("multiples of 8, got 13")
    expect(page.locator("#error-steps")).to_contain_text("less than or equal to 500")
    fill(page, size="2048x2048")
    expect(page.locator("#error-size")).to_have_text("")
    assert page.get_attribute("#size", "aria-invalid") is None
    expect(page.locator("#error-steps")).to_contain_text("less than or equal to 500")
    expect(page.locator("#steps")).to_have_attribute("aria-invalid", "true")
    fill(page, steps="2", size="64x4096")
    with page.expect_response(re.compile(r"/generate$")):
        page.click("#generate")
    expect(page.locator("#error-size")).to_have_text(
        "width and height must be between 64 and 2048, got 4096"
    )
    expect(page.locator("#error-steps")).to_have_text("")
    assert not jobs(ui_app, "fixed field")  # nothing was queued


def test_an_empty_or_blank_prompt_says_enter_a_prompt(new_page, ui_app):
    """Not the API's "Field required": the page refuses it before any request, by the API's
    own rule for blank (config/text.py: spaces of any kind, zero-width and combining marks).
    Each submit clears the messages first, so each try's message is its own."""
    page = open_ui(new_page, ui_app)
    sent: list[Request] = []
    page.on("request", lambda request: sent.append(request))
    for prompt in ("", "   ", "\u00a0\u2003\u200b\u0301"):
        fill(page, prompt=prompt)
        page.click("#generate")
        expect(page.locator("#error-prompt")).to_have_text("Enter a prompt")
        expect(page.locator("#prompt")).to_have_attribute("aria-invalid", "true")
        expect(page.locator("#prompt")).to_be_focused()
        expect(page.locator("#form-error")).to_be_hidden()
    screenshot(page, "09-blank-prompt")
    assert not [r.url for r in sent if r.url.endswith("/generate")]


def test_the_queue_is_followed_with_one_poll_and_no_event_stream(new_page, token_ui_app):
    """On an app with a token (given to the tab beforehand): jobs under way are read with one
    request a second, never an event stream each (EVENT_STREAMS_MAX is small), and each
    ended job once."""
    page = new_page()
    page.context.add_init_script(f"sessionStorage.setItem('imagegen.token', '{TOKEN}')")
    page.goto(token_ui_app.url("/ui/"))
    expect(page.locator("#model-state")).to_have_text("ready")
    sent: list[tuple[float, Request]] = []
    page.on("request", lambda request: sent.append((time.monotonic(), request)))
    fill(page, prompt="watched on the wire", steps="6", size="64x64", count="2")
    page.click("#generate")
    expect(
        page.locator("#gallery li .prompt").filter(has_text="watched on the wire")
    ).to_have_count(2, timeout=WAIT_MS)
    time.sleep(1.5)  # a poll or two more, with nothing under way

    ids = [job["id"] for job in jobs(token_ui_app, "watched on the wire")]
    # Not the blob: URLs it makes, nor the estimates it asks for after edits (GET).
    calls = [(at, r.method, r.url.removeprefix(token_ui_app.base_url), r) for at, r in sent
             if r.url.startswith(token_ui_app.base_url)
             and "/generate/estimate" not in r.url]  # fmt: skip
    assert not [path for _, _, path, _ in calls if path.endswith("/events")]
    assert [m for _, m, path, _ in calls if m != "GET" or "/generate" in path] == ["POST"] * 2
    polls = [at for at, _, path, _ in calls if path == "/jobs?unfinished=true&limit=200"]
    # About one a second while jobs are under way (one more at each Generate), never a
    # tight loop.
    assert 2 <= len(polls) <= (polls[-1] - polls[0]) / 0.9 + 3
    # Each ended job read once. A job that outlives PREVIEW_SECONDS on a loaded machine also has
    # its preview fetched: that is the page working, not a second read of the job.
    alone = sorted(path for _, _, path, _ in calls
                   if path.startswith("/jobs/") and not path.endswith("/preview"))  # fmt: skip
    assert alone == sorted(f"/jobs/{job_id}" for job_id in ids)
    previews = {path.removesuffix("/preview") for _, _, path, _ in calls
                if path.endswith("/preview")}  # fmt: skip
    assert previews <= set(alone)
    api = [r for *_, r in calls if re.search(r"/(generate|jobs|images)", r.url)]
    assert all(r.headers.get("authorization") == f"Bearer {TOKEN}" for r in api)


def test_every_control_is_usable_on_a_390px_wide_screen(new_page, ui_app):
    page = open_ui(new_page, ui_app, width=390, height=844)
    fill(page, prompt="on a phone", steps="2", size="64x64")
    page.click("#generate")
    done(page, "on a phone")
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
    expect(page.locator("#queue-status")).to_have_attribute("aria-live", "polite")
    page.evaluate("window.scrollTo(0, 0)")
    screenshot(page, "09-phone", full_page=True)


def test_the_page_is_usable_by_keyboard_alone_and_ctrl_enter_generates_a_batch(new_page, ui_app):
    page = open_ui(new_page, ui_app)
    page.focus("#prompt")
    page.keyboard.type("typed, never clicked")
    order = []
    for _ in range(12):
        page.keyboard.press("Tab")
        order.append(page.evaluate("document.activeElement.id"))
    # The picker first, then the LoRAs' one control here (none is offered: no Add).
    assert order[:5] == ["model", "lora-refresh", "negative_prompt", "steps", "guidance"]
    assert order.index("count") < order.index("generate")
    page.focus("#steps")
    page.keyboard.type("2")
    page.focus("#count")
    page.keyboard.press("Control+a")
    page.keyboard.type("9")  # above GEN_MAX_N (4 here)
    page.focus("#prompt")
    page.keyboard.press("Meta+Enter")  # Cmd+Enter on a Mac
    expect(page.locator("#error-count")).to_have_text(
        "Batch count must be a whole number from 1 to 4 (GEN_MAX_N)"
    )
    expect(page.locator("#count")).to_be_focused()
    assert not jobs(ui_app, "typed, never clicked")  # nothing was queued
    page.keyboard.press("Control+a")
    page.keyboard.type("2")
    page.focus("#seed")
    page.keyboard.type("77")
    page.keyboard.press("Control+Enter")
    cards = page.locator("#gallery li").filter(
        has=page.get_by_text("typed, never clicked", exact=True)
    )
    expect(cards).to_have_count(2, timeout=WAIT_MS)
    expect(page.locator("#error-count")).to_have_text("")
    seeds = sorted(job["parameters"]["seed"] for job in jobs(ui_app, "typed, never clicked"))
    assert seeds == [77, 78]  # one job each, seed and seed + 1
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
