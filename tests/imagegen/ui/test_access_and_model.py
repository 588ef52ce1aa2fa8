"""The page with API_TOKEN set (asked once, kept in sessionStorage, sent as a Bearer header,
never in a URL or a cookie), and the model panel from not_started through a pull to ready,
and to failed with the error: each state says what a person can do (press Pull, and what it
fetches), and so does the form when Generate was refused for the model."""

import re
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from pathlib import Path

import pytest
import requests
from django.test import override_settings
from playwright.sync_api import Request, Route, expect

from imagegen.backend import build_backend
from imagegen.model.adapters import DEFAULT_MODEL_ID
from imagegen.model.download_size import LIGHTNING_4STEP_LORA_BYTES, SDXL_BASE_FP16_BYTES
from tests.imagegen.ui.conftest import TOKEN, WAIT_MS, UiApp, screenshot
from tests.support.in_process import settings_for
from tests.support.processes import free_port


def _empty_gallery(app: UiApp) -> None:
    """The token app is the package's: another module's test may have left images in it."""
    while items := requests.get(app.url("/images?limit=100"), headers=app.headers,
                                timeout=30).json()["items"]:  # fmt: skip
        for item in items:
            url = app.url(f"/images/{item['id']}")
            gone = requests.delete(url, headers=app.headers, timeout=30)
            assert gone.status_code in (200, 204), gone.text


def test_the_token_is_asked_once_and_sent_only_as_a_bearer_header(new_page, token_ui_app):
    _empty_gallery(token_ui_app)
    page = new_page()
    sent: list[Request] = []
    page.on("request", lambda request: sent.append(request))
    page.goto(token_ui_app.url("/ui/"))
    dialog = page.locator("#token-dialog")
    expect(dialog).to_be_visible()
    expect(page.locator("#token")).to_be_focused()
    screenshot(page, "10-token")

    page.fill("#token", "not-the-token")
    page.keyboard.press("Enter")
    expect(page.locator("#token-error")).to_have_text("That token was refused; try again.")
    expect(dialog).to_be_visible()
    page.fill("#token", TOKEN)
    page.keyboard.press("Enter")
    expect(dialog).to_be_hidden()
    expect(page.locator("#gallery-empty")).to_have_text("No images yet.")

    page.fill("#prompt", "behind a token")
    page.fill("#steps", "2")
    page.fill("#size", "64x64")
    page.click("#generate")
    expect(page.locator("#queue-status")).to_contain_text("Done in", timeout=WAIT_MS)
    first = page.locator("#gallery li").first
    expect(first.locator("img")).to_have_attribute("src", re.compile("^blob:"))

    assert page.evaluate("sessionStorage.getItem('imagegen.token')") == TOKEN
    assert page.context.cookies() == []
    assert not [r.url for r in sent if TOKEN in r.url]
    # The estimate beside Generate is asked at load too, alongside the token's first test.
    calls = [r for r in sent if re.search(r"/(generate|jobs|images)", r.url)
             and "/generate/estimate" not in r.url]  # fmt: skip
    poll = "/jobs?unfinished=true&limit=200"
    ends = {(r.method, end) for r in calls for end in ("/generate", poll, ".png")
            if r.url.endswith(end)}  # fmt: skip
    assert ends == {("POST", "/generate"), ("GET", poll), ("GET", ".png")}
    # The gallery's first call carried the refused token; every call since, the right one.
    bearers = [r.headers.get("authorization") for r in calls]
    assert bearers == ["Bearer not-the-token"] + [f"Bearer {TOKEN}"] * (len(calls) - 1)

    # Asked once: a reload in the same tab keeps it; the page loads the gallery at once.
    page.reload()
    expect(page.locator("#gallery li")).to_have_count(1)
    expect(dialog).to_be_hidden()
    # "Forget token" takes it out of the tab, and the prompts kept for the next visit too.
    assert "behind a token" in page.evaluate("localStorage.getItem('imagegen.form')")
    page.click("#forget-token")
    assert page.evaluate("sessionStorage.getItem('imagegen.token')") is None
    expect(page.locator("#forget-token")).to_be_hidden()
    assert page.evaluate("localStorage.getItem('imagegen.form')") is None
    expect(page.locator("#prompt")).to_have_value("")
    page.reload()
    expect(page.locator("#prompt")).to_have_value("")
    # The HTML itself holds no data and is served without the token.
    assert requests.get(token_ui_app.url("/ui/"), timeout=10).status_code == 200
    assert requests.get(token_ui_app.url("/images"), timeout=10).status_code == 401


def test_a_refusal_answered_after_a_new_token_was_given_retries_with_it(new_page, token_ui_app):
    """Calls sent with a refused token can answer after the person typed the right one; such a
    late 401 is that old token's, so the call goes again with the new one and the dialog stays
    closed (it used to open again over the form and forget the good token)."""
    page = new_page()
    held: list[Route] = []

    def hold_refused(route: Route) -> None:
        if route.request.headers.get("authorization") == "Bearer not-the-token":
            held.append(route)
        else:
            route.continue_()

    page.route("**/generate/estimate*", hold_refused)
    page.goto(token_ui_app.url("/ui/"))
    dialog = page.locator("#token-dialog")
    page.fill("#token", "not-the-token")
    page.keyboard.press("Enter")
    expect(page.locator("#token-error")).to_have_text("That token was refused; try again.")
    page.fill("#token", TOKEN)
    page.keyboard.press("Enter")
    expect(dialog).to_be_hidden()
    expect(page.locator("#gallery-empty")).to_have_text("No images yet.")

    assert len(held) == 1
    held[0].continue_()  # its 401 arrives now, after the right token was given
    expect(page.locator("#estimate")).not_to_be_empty(timeout=60_000)
    expect(dialog).to_be_hidden()
    assert page.evaluate("sessionStorage.getItem('imagegen.token')") == TOKEN


@pytest.fixture
def start_app(
    new_page, ui_server: str, tmp_path: Path, model_env: dict[str, str]
) -> Iterator[Callable[..., UiApp]]:
    """Starts apps on this test's share, each a backend of its own built as a new process
    builds one, with a fresh local download cache, as a new container revision would. Served
    here, one at a time: the last one started is the one the package's server answers for
    (an earlier one's pages follow it, and are asked nothing more); the pages close first."""
    started: list[UiApp] = []
    with ExitStack() as current:

        def start(**env: str) -> UiApp:
            cache = {"DOWNLOAD_CACHE_DIR": str(tmp_path / f"cache-{len(started)}")}
            full = {**model_env, **cache, **env}
            current.close()  # built on its own settings alone, not over the last app's
            with override_settings(**settings_for(full)):
                app = UiApp(ui_server, build_backend(), full)
            started.append(app)
            current.enter_context(app.serving())
            return app

        try:
            yield start
        finally:
            new_page.close_pages()
    for app in started:
        assert app.backend is not None
        for job in app.backend.jobs.unfinished():
            app.backend.jobs.cancel(job.id)


def test_the_model_panel_shows_the_state_and_pulls(start_app, hub, new_page):
    app = start_app()
    page = new_page()
    page.goto(app.url("/ui/"))
    expect(page.locator("#model-state")).to_have_text("not_started")
    expect(page.locator("#model-share")).to_have_text("no")
    expect(page.locator("#model-id")).to_have_text("testorg/tiny-sd")
    # What a person can do, not an API call; this model's size is not documented.
    expect(page.locator("#model-detail")).to_have_text(
        "Not downloaded yet: press Pull to download it from the model hub."
    )
    expect(page.locator("#model-pull")).to_have_text(
        "Pull (download; the size shows once it starts)"
    )
    # Generate before a pull: the form says to press Pull, and follows the model from then on.
    page.fill("#prompt", "too early")
    with page.expect_response(re.compile(r"/generate$")) as refused:
        page.click("#generate")
    assert refused.value.status == 409  # the API's own answer is unchanged
    form_error = page.locator("#form-error")
    expect(form_error).to_have_text(
        "The model is not downloaded yet: press Pull in the Model panel first."
    )
    screenshot(page, "11-model-not-started")
    hub.throttle_bytes_per_sec = 50_000  # a download long enough to watch
    page.click("#model-pull")
    expect(page.locator("#model-state")).to_have_text("downloading", timeout=WAIT_MS)
    expect(page.locator("#model-detail")).to_have_text(
        re.compile(r"^Downloaded [0-9.]+ [kMG]?B of [1-9][0-9.]* [kMG]?B$"), timeout=WAIT_MS
    )
    downloading = "The model is still downloading: Generate again once the Model panel says ready."
    expect(form_error).to_have_text(downloading)
    screenshot(page, "12-model-downloading")
    # Another tab, which did not start the pull: refused now, it follows the pull to the end.
    other = new_page()
    other.goto(app.url("/ui/"))
    other.fill("#prompt", "from another tab")
    other.click("#generate")
    expect(other.locator("#form-error")).to_have_text(downloading)
    hub.throttle_bytes_per_sec = None
    expect(other.locator("#model-state")).to_have_text("ready", timeout=WAIT_MS)
    expect(other.locator("#form-error")).to_be_hidden()
    expect(page.locator("#model-state")).to_have_text("ready", timeout=WAIT_MS)
    expect(page.locator("#model-share")).to_have_text("yes")
    expect(page.locator("#model-pull")).to_be_disabled()
    expect(page.locator("#model-pull")).to_have_text("Pull")  # nothing left to fetch
    expect(page.locator("#model-detail")).to_have_text("")
    expect(form_error).to_be_hidden()  # nothing left to do about the model
    screenshot(page, "13-model-ready")
    # A new process on that share: nothing to download, and Pull says so.
    warm = start_app()
    page.goto(warm.url("/ui/"))
    expect(page.locator("#model-state")).to_have_text("not_started")
    expect(page.locator("#model-pull")).to_have_text("Pull (load from the share)")
    expect(page.locator("#model-detail")).to_have_text(
        "On the share, not loaded yet: press Pull to load it now, or Generate (the first image "
        "loads it)."
    )

    # The default model (its documented size) with HF_ENDPOINT at a closed port: the pull
    # fails, and the panel says where the hub is, that it is unreachable, and the way out.
    endpoint = f"http://127.0.0.1:{free_port()}"
    offline = start_app(MODEL_ID=DEFAULT_MODEL_ID, HF_ENDPOINT=endpoint)
    page.goto(offline.url("/ui/"))
    size = f"about {(SDXL_BASE_FP16_BYTES + LIGHTNING_4STEP_LORA_BYTES) / 1e9:.1f} GB"
    assert size == "about 7.3 GB"
    expect(page.locator("#model-pull")).to_have_text(f"Pull (download {size})")
    expect(page.locator("#model-detail")).to_have_text(
        f"Not downloaded yet: press Pull to download it from the model hub ({size})."
    )
    page.click("#model-pull")
    expect(page.locator("#model-state")).to_have_text("failed", timeout=WAIT_MS)
    error = requests.get(offline.url("/model/status"), timeout=10).json()["error"]
    expect(page.locator("#model-error")).to_have_text(error)
    assert error.startswith(f"The model hub at {endpoint} (HF_ENDPOINT) is unreachable")
    assert "set HF_ENDPOINT to a mirror" in error
    assert "try the offline demo (./scripts/serve --demo)" in error
    assert error.endswith("Cause: ConnectError: [Errno 111] Connection refused")
    expect(page.locator("#model-detail")).to_have_text("Press Pull to try again.")
    expect(page.locator("#model-pull")).to_be_enabled()  # a new pull retries
    # Generate now: the form points at the panel's reason instead of the API's 503.
    page.fill("#prompt", "after a failed pull")
    page.click("#generate")
    expect(form_error).to_have_text(
        "The model could not be pulled: the Model panel says why; press Pull there to try again."
    )
    screenshot(page, "14-model-failed")
