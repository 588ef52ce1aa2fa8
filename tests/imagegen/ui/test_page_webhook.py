"""The Queue panel shows a job's webhook in a real browser (in-process mode, served here):
while the job runs, that it will be told; once it ended, its delivery's state, its tries and
the last one's answer, as the job's `webhook` field says."""

import re
import socket
import time

import requests
from playwright.sync_api import expect

from tests.imagegen.ui.conftest import WAIT_MS
from tests.imagegen.ui.test_page import cancel_unfinished, jobs, open_ui, queued

PROMPT = "a job with a webhook"


def test_a_queue_entry_shows_its_jobs_webhook_and_its_last_delivery(new_page, ui_app):
    # A port held but not listening: every try is refused, and no other process can take it.
    closed = socket.socket()
    closed.bind(("127.0.0.1", 0))
    hook = f"http://127.0.0.1:{closed.getsockname()[1]}/hook"
    page = open_ui(new_page, ui_app)
    try:
        # Long enough to be cancelled under way: at 64x64 its 400 steps end in a few seconds
        # on an idle core, before the page's next idle poll (5 s) may even show it, and a
        # Cancel pressed after its end is answered 409 and the entry leaves for the gallery.
        data = {"prompt": PROMPT, "steps": "400", "size": "256x256", "async": "true",
                "webhook_url": hook}  # fmt: skip
        response = requests.post(ui_app.url("/generate"), data=data, timeout=30)
        assert response.status_code == 202, response.text
        item = queued(page, PROMPT)
        line = item.locator(".job-webhook")
        expect(line).to_have_text("Webhook: told when it ends", timeout=WAIT_MS)
        item.locator(".cancel").click()
        expect(item.locator(".job-state")).to_have_text("Cancelled", timeout=WAIT_MS)
        deadline = time.monotonic() + 120  # a loaded machine: the first try within it
        while not [j for j in jobs(ui_app, PROMPT) if j["webhook"]["tries"]]:
            assert time.monotonic() < deadline, jobs(ui_app, PROMPT)
            time.sleep(0.2)
        page.reload()  # an ended job is read once, when the page (re)opens
        expect(queued(page, PROMPT).locator(".job-webhook")).to_have_text(
            re.compile(r"^Webhook pending: \d+ tr(y|ies), last ConnectionRefusedError"),
            timeout=60_000,
        )
    finally:
        closed.close()
        cancel_unfinished(ui_app)
