"""The Queue panel's live preview in a real browser against the app (tiny pipeline), in both
job modes (in process: served here; distributed: a web replica served here too, on the
session's shared Redis and worker, where the worker writes the previews to Redis): a running
job shows the picture forming in its place and the time left (its remaining steps at the pace
measured so far, as the API's eta_seconds); a cancelled job keeps its last preview, captioned
"Cancelled at step n"."""

import re
import time
from collections.abc import Iterator

import pytest
from playwright.sync_api import expect

from tests.imagegen.ui.conftest import WAIT_MS, app_env, screenshot
from tests.imagegen.ui.test_page import cancel_unfinished, fill, jobs, open_ui, queued
from tests.support.in_process import Served
from tests.support.stack_replica import stack_replica_here
from tests.support.xdist_schedule import stack_of

PROMPT = "a picture forming"


@pytest.fixture(params=["in-process", "distributed"])
def app(request: pytest.FixtureRequest) -> Iterator[Served]:
    if request.param == "in-process":
        yield request.getfixturevalue("ui_app")
        return
    stack = stack_of(request)
    with stack_replica_here(stack, **app_env()) as replica:
        yield replica


def test_a_running_job_shows_its_preview_and_time_left_and_a_cancelled_one_keeps_it(app, new_page):
    page = open_ui(new_page, app)
    try:
        fill(page, prompt=PROMPT, steps="400", size="256x256")  # minutes: cancelled under way
        page.click("#generate")
        item = queued(page, PROMPT)
        figure = item.locator(".job-preview")
        expect(figure.locator("img")).to_be_visible(timeout=WAIT_MS)
        expect(figure.locator("img")).to_have_attribute("src", re.compile(r"^blob:"))
        expect(figure.locator("figcaption")).to_have_text(
            re.compile(r"^Preview at step [1-9]\d* of 400$")
        )
        natural = figure.locator("img").evaluate("img => [img.naturalWidth, img.naturalHeight]")
        assert 0 < max(natural) <= 256 // 4  # the approximation: the output's side / 4
        # The time left: the remaining steps at the measured step time (the API's ETA).
        steps = item.locator(".job-steps")
        expect(steps).to_have_text(re.compile(r"^Step \d+ of 400, about \d+ s left$"))
        # The first steps' times move the estimate a lot on a loaded machine: the page and
        # the API, read one after the other, agree within a few tries (the page polls 1/s).
        pairs = []
        for _ in range(10):
            shown = int(re.search(r"about (\d+) s left", steps.inner_text()).group(1))
            eta = jobs(app, PROMPT)[0]["progress"]["eta_seconds"]
            pairs.append((shown, eta))
            if eta is not None and abs(shown - eta) <= 3 + 0.25 * eta:
                break
            time.sleep(1)
        else:
            raise AssertionError(f"the page's time left never matched the API's: {pairs}")
        screenshot(page, "10-preview")

        item.locator(".cancel").click()
        expect(item.locator(".job-state")).to_have_text("Cancelled", timeout=WAIT_MS)
        expect(figure.locator("img")).to_be_visible()  # what was stopped stays in view
        expect(figure.locator("figcaption")).to_have_text(re.compile(r"^Cancelled at step \d+$"))
        screenshot(page, "11-preview-cancelled")
    finally:
        cancel_unfinished(app)
