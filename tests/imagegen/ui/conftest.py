"""The page in a real browser: Debian's chromium, driven headless by Playwright (Python), against
the app on the tiny pipeline, served from this process (tests/support/in_process.py's loopback
server): what the page shows is the routes' and the page's behaviour, not gunicorn's. One
browser and one server serve the package; each app is a backend of its own, built once, and
a test's app fixture makes it the one served (UiApp.serving). Nothing is downloaded:
Playwright launches the system's chromium (scripts/system_packages.sh installs it), never a
browser of its own.

Every page is held to its app's own origin (the page promises no third-party asset): a request
to any other origin fails the test, and one off the test machine never leaves the browser. So
does a Content-Security-Policy violation, which the page's policy turns any such asset into.

Screenshots of each state go to .artifacts/ui/ (kept out of git)."""

import logging
import re
import shutil
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import urlsplit

import pytest
import requests
from django.conf import settings
from django.test import override_settings
from playwright.sync_api import Browser, ConsoleMessage, Page, Request, sync_playwright

from imagegen.api.webhook_events import event_data
from imagegen.backend import Backend, build_backend, installed
from imagegen.services.webhooks import webhook_secrets
from imagegen.webhooks.addresses import Allowance
from imagegen.webhooks.delivery import TICK, Dispatcher, Policy
from tests.support.in_process import LoopbackApp, loopback, settings_for
from tests.support.local_hub import LocalHub
from tests.support.model_service import model_service_env
from tests.support.processes import ROOT

ARTIFACTS = ROOT / ".artifacts" / "ui"
# Each event stream's life in ui_app: even a job of a few steps outlives a few streams, so
# the page resumes them (token_ui_app keeps the default, 220 s: one stream per job).
STREAM_SECONDS = 0.25
TOKEN = "ui-test-token"
# Signs the webhooks of the open app's jobs (test_page_webhook.py).
WEBHOOK_SECRET = "whsec_" + "d2ViaG9vay1zZWNyZXQtb2YtdGhlLXVpLWFwcC0zMmI="
# A loaded 2-core machine runs the browser, the app and the model together: expectations wait.
WAIT_MS = 300_000


@pytest.fixture(scope="session")
def browser() -> Iterator[Browser]:
    chromium = shutil.which("chromium")
    assert chromium, "Debian's chromium is needed (scripts/system_packages.sh installs it)"
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=chromium, headless=True)
        yield browser
        browser.close()


def app_env(**extra: str) -> dict[str, str]:
    return {"GEN_MAX_STEPS": "500", "GEN_DEFAULT_STEPS": "3", **extra}


def wait_until_loaded(app: "UiApp", timeout: float = 300) -> dict:
    """The model's status once its pull ends; each look may wait long on a loaded machine."""
    deadline = time.monotonic() + timeout
    while True:
        status = requests.get(app.url("/model/status"), headers=app.headers, timeout=60).json()
        if status["state"] in ("ready", "failed") or time.monotonic() > deadline:
            return status
        time.sleep(0.1)


class UiApp(LoopbackApp):
    """An app served from this process (the package's one loopback server) on a backend of
    its own, built from its settings as a start builds one. Several are built for the
    package; `serving()` makes one the app the server answers for, settings and backend."""

    def __init__(self, base_url: str, built: Backend, env: dict[str, str]) -> None:
        super().__init__(base_url, built, env)
        self.overrides = settings_for(env)
        token = env.get("API_TOKEN")
        self.headers = {"Authorization": f"Bearer {token}"} if token else {}

    @contextmanager
    def serving(self) -> Iterator["UiApp"]:
        assert self.backend is not None
        with override_settings(**self.overrides), installed(self.backend):
            yield self


@contextmanager
def webhook_senders(app: UiApp) -> Iterator[None]:
    """The webhook senders a web process starts at its start (imagegen.apps), on this app's
    backend: the app's own Dispatcher, its tick run every TICK seconds until the block ends
    (a process's loop never ends, and this one's backend does). It mirrors
    imagegen.services.webhooks.webhooks_start, which starts one loop for a process's life;
    that start itself is tested end to end (tests/imagegen/webhooks/test_webhooks.py)."""
    assert app.backend is not None
    with app.serving():
        policy = Policy(
            allow=Allowance.parse(settings.WEBHOOK_ALLOW),
            retry_seconds=settings.WEBHOOK_RETRY_SECONDS,
            senders=settings.WEBHOOK_SENDERS,
        )
    dispatcher = Dispatcher(app.backend.webhooks, app.backend.jobs, policy,
                            describe=event_data, secrets_for=webhook_secrets)  # fmt: skip
    stop = threading.Event()

    def loop() -> None:
        while not stop.wait(TICK):
            try:
                dispatcher.tick()
            except Exception:  # as the process's loop: the next tick tries again
                logging.getLogger(__name__).exception("webhooks: a tick failed")

    thread = threading.Thread(target=loop, name="ui-webhooks", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(10)


@contextmanager
def pulled_app(base_url: str, hub_root: Path, work: Path, **env: str) -> Iterator[UiApp]:
    """An app of its own served here (UiApp) with the tiny model pulled through its routes
    (with the token when it has one): its hub lives as long as it does. Its unfinished jobs
    are cancelled at the end."""
    with LocalHub(hub_root) as hub:
        base = model_service_env(hub.url, work / "share", work)
        full = {**base, **app_env(**env)}
        with override_settings(**settings_for(full)):
            built = build_backend()
        app = UiApp(base_url, built, full)
        try:
            with app.serving():
                pulled = requests.post(app.url("/model/pull"), headers=app.headers, timeout=30)
                assert pulled.status_code == 202, pulled.text
                assert wait_until_loaded(app)["state"] == "ready"
            yield app
        finally:
            for job in built.jobs.unfinished():
                built.jobs.cancel(job.id)


@pytest.fixture(scope="package")
def ui_server() -> Iterator[str]:
    """The package's loopback server: it answers for whichever UiApp is serving."""
    with loopback() as base_url:
        yield base_url


@pytest.fixture(scope="package")
def _open_app(
    ui_server: str, hub_root: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[UiApp]:
    work = tmp_path_factory.mktemp("ui-app")
    webhooks = {"WEBHOOK_SECRET": WEBHOOK_SECRET, "WEBHOOK_ALLOW": "127.0.0.1"}
    stream = {"EVENT_STREAM_SECONDS": str(STREAM_SECONDS)}
    with (
        pulled_app(ui_server, hub_root, work, **stream, **webhooks) as app,
        webhook_senders(app),
    ):
        yield app


@pytest.fixture(scope="package")
def _token_app(
    ui_server: str, hub_root: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[UiApp]:
    with pulled_app(ui_server, hub_root, tmp_path_factory.mktemp("ui-token-app"),
                    API_TOKEN=TOKEN) as app:  # fmt: skip
        yield app


@contextmanager
def served_to(new_page, app: UiApp) -> Iterator[UiApp]:
    """`app` served for a test; its pages close before it stops being served, so no request
    of theirs reaches another app."""
    with app.serving():
        try:
            yield app
        finally:
            new_page.close_pages()


@pytest.fixture
def ui_app(new_page, _open_app: UiApp) -> Iterator[UiApp]:
    with served_to(new_page, _open_app) as app:
        yield app


@pytest.fixture
def token_ui_app(new_page, _token_app: UiApp) -> Iterator[UiApp]:
    with served_to(new_page, _token_app) as app:
        yield app


class PageErrors(list):
    """Script errors of the page; a test that ends with any fails."""


# The apps under test listen on 127.0.0.1 (tests.support.processes); a request for any other
# host is aborted in the browser, so nothing the page asks for reaches the network.
OFF_THE_MACHINE = re.compile(r"^(?!(blob:)?http://127\.0\.0\.1:[0-9]+/|data:)")


def origin(url: str) -> str | None:
    """A URL's origin; a blob: URL's is the page's that made it; a data: URL fetches nothing."""
    if url.startswith("data:"):
        return None
    parts = urlsplit(url.removeprefix("blob:"))
    return f"{parts.scheme}://{parts.netloc}"


@pytest.fixture
def new_page(browser: Browser) -> Iterator:
    """Opens pages in fresh browser contexts (their own sessionStorage), each watched for
    script errors, for Content-Security-Policy violations and for every request it makes:
    any error, violation or request to an origin other than the app's own (the one the test
    navigated to) fails the test."""
    contexts = []
    errors = PageErrors()
    violations: list[str] = []
    elsewhere: list[str] = []

    def open_page(*, width: int = 1280, height: int = 900) -> Page:
        context = browser.new_context(viewport={"width": width, "height": height})
        context.set_default_timeout(WAIT_MS)
        context.route(OFF_THE_MACHINE, lambda route: route.abort())
        contexts.append(context)
        page = context.new_page()
        # The apps the test opened in this page (one, or two one after the other): a set, so
        # that a request the last page sent while the next one was loading is not counted.
        own: set[str] = set()

        def watch(request: Request) -> None:
            if request.is_navigation_request() and request.frame.parent_frame is None:
                if OFF_THE_MACHINE.match(request.url):
                    elsewhere.append(f"{request.method} {request.url} (a navigation)")
                else:
                    own.add(origin(request.url))
            elif (where := origin(request.url)) is not None and where not in own:
                elsewhere.append(f"{request.method} {request.url} (from {page.url})")

        def console(message: ConsoleMessage) -> None:
            if message.type == "error" and "Content Security Policy" in message.text:
                violations.append(message.text)
            elif message.type == "error":
                errors.append(message.text)

        page.on("request", watch)
        page.on("pageerror", lambda error: errors.append(str(error)))
        page.on("console", console)
        return page

    def close_pages() -> None:
        while contexts:
            contexts.pop().close()

    open_page.close_pages = close_pages  # type: ignore[attr-defined]
    yield open_page
    close_pages()
    problems = {
        "requests to an origin other than the app's own": elsewhere,
        "Content-Security-Policy violations": violations,
        # The browser logs every 4xx answer as "Failed to load resource"; refusals are expected.
        "script errors": [e for e in errors if not e.startswith("Failed to load resource")],
    }
    found = {what: items for what, items in problems.items() if items}
    if found:
        pytest.fail(
            "\n".join(f"{what}:\n  " + "\n  ".join(items) for what, items in found.items()),
            pytrace=False,
        )


def screenshot(page: Page, name: str, *, full_page: bool = False) -> Path:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    path = ARTIFACTS / f"{name}.png"
    page.screenshot(path=str(path), full_page=full_page)
    return path
