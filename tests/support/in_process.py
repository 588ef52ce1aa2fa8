"""The app in this process for the real client libraries: the openai SDK over httpx's WSGI
transport, and a loopback port for clients that speak only over a socket (webuiapi's requests
session). Both reach the same Django app and backend as the test's own calls (tests/support/
loaders.py `serve`), so no gunicorn is started. For modules that talk plain HTTP to an app of
given settings (an AppServer's url()), the same app served here on a backend built from those
settings (served_here, ready_here, ready_in_either_mode), or on a database (todos_here)."""

import os
import runpy
import threading
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from unittest import mock
from wsgiref.util import is_hop_by_hop

import httpx2
import mongoengine
import openai
import pytest
from django.core.handlers.wsgi import WSGIHandler
from django.core.servers.basehttp import ThreadedWSGIServer, WSGIRequestHandler
from django.test import override_settings

from imagegen.backend import Backend, build_backend, installed
from tests.support.local_hub import LocalHub
from tests.support.model_service import (
    PULL_TIMEOUT,
    model_service_env,
    pull_until_ready,
    ready_in_mode,
)
from tests.support.processes import ROOT, AppServer
from todos import indexes, transactions
from todos.connection import connect_database

BASE_URL = "http://testserver"


def openai_client(**client: Any) -> openai.OpenAI:
    """The openai SDK on the app's /v1 routes, its requests handled in this process;
    `client` goes to the SDK (api_key, max_retries) or, as event_hooks, to httpx."""
    hooks = client.pop("event_hooks", None)
    transport = httpx2.WSGITransport(app=WSGIHandler())
    http_client = openai.DefaultHttpxClient(transport=transport, event_hooks=hooks)
    return openai.OpenAI(base_url=f"{BASE_URL}/v1", http_client=http_client, **client)


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        """The test's own assertions say what went wrong; no access line per request."""


def without_hop_by_hop(app: Callable) -> Callable:
    """`app` with the hop-by-hop headers of its answers dropped, as gunicorn drops them (the
    MCP route's streams say `Connection: keep-alive`, which wsgiref refuses)."""

    def wrapped(environ: dict, start_response: Callable) -> Iterable[bytes]:
        def start(status: str, headers: list[tuple[str, str]], *exc_info: Any) -> Any:
            kept = [(name, value) for name, value in headers if not is_hop_by_hop(name)]
            return start_response(status, kept, *exc_info)

        return app(environ, start)

    return wrapped


@contextmanager
def loopback() -> Iterator[str]:
    """The app on a free 127.0.0.1 port, served from threads of this process (Django's own
    test server), its answers framed as gunicorn frames them; yields its base URL."""
    server = ThreadedWSGIServer(("127.0.0.1", 0), _QuietHandler, allow_reuse_address=False)
    server.set_app(without_hop_by_hop(WSGIHandler()))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(10)


def settings_for(env: dict[str, str]) -> dict[str, Any]:
    """The settings that `env` (environment variables, as a process would get them) changes:
    config/settings.py run again with them over this process's environment, so each value is
    parsed, checked and derived (GEN_MAX_N from GEN_QUEUE_MAX ...) exactly as at a start."""
    path = str(ROOT / "config" / "settings.py")
    before = runpy.run_path(path)
    with mock.patch.dict(os.environ, env):
        after = runpy.run_path(path)
    return {
        name: value
        for name, value in after.items()
        if name.isupper() and (name not in before or before[name] != value)
    }


class LoopbackApp:
    """The app served from this process (loopback) on a backend of its own: what tests that
    talk HTTP to an AppServer use of it (url, base_url), without a gunicorn."""

    def __init__(
        self, base_url: str, built: Backend | None = None, env: dict[str, str] | None = None
    ) -> None:
        self.base_url = base_url
        self.backend = built
        self.env = dict(env or {})  # the settings it was given, as an AppServer's environment

    def url(self, path: str) -> str:
        return self.base_url + path

    def log_tail(self, lines: int = 40) -> str:
        """The app's log is the test run's own (pytest shows it with a failure)."""
        return ""


@contextmanager
def served_here(**env: str) -> Iterator[LoopbackApp]:
    """A web process's settings `env` (settings_for), a backend built from them as a start
    builds one (imagegen.backend.build_backend) and installed, and the app served on a
    loopback port, for the block; the jobs left unfinished are cancelled at its end."""
    with override_settings(**settings_for(env)):
        built = build_backend()
        with installed(built), loopback() as base_url:
            try:
                yield LoopbackApp(base_url, built, env)
            finally:
                for job in built.jobs.unfinished():
                    built.jobs.cancel(job.id)


@contextmanager
def ready_here(hub_root: Path, work: Path, **env: str) -> Iterator[LoopbackApp]:
    """model_service.ready_app in this process: the service's settings for a hub and share of
    its own with `env` over them, served here (served_here), the tiny SD model pulled and
    loaded through the app's own routes."""
    with LocalHub(hub_root) as hub:
        base = {**model_service_env(hub.url, work / "share", work), **env}
        with served_here(**base) as app:
            pull_until_ready(app, timeout=PULL_TIMEOUT["in-process"])
            yield app


# What a test module's `app` fixture yields: served here, or a process (gunicorn).
Served = LoopbackApp | AppServer


@contextmanager
def ready_in_either_mode(
    request: pytest.FixtureRequest, mode: str, hub_root: Path, work: Path, **env: str
) -> Iterator[Served]:
    """model_service.ready_in_mode with the in-process mode served here (ready_here), no
    gunicorn: for modules whose behaviour is the routes' and the job board's, not the server
    process's. Distributed: a web replica on the session's shared stack, as there."""
    if mode == "in-process":
        with ready_here(hub_root, work, **env) as app:
            yield app
        return
    with ready_in_mode(request, mode, hub_root, work, **env) as server:
        yield server


@contextmanager
def todos_here(mongodb_uri: str) -> Iterator[LoopbackApp]:
    """The app served from this process with its MongoEngine connected to `mongodb_uri` as a
    start connects it (MONGODB_URI), the todo modules' once-per-process facts (indexes made,
    transactions supported) learnt afresh; disconnected at the end."""
    with pytest.MonkeyPatch.context() as patch, override_settings(MONGODB_URI=mongodb_uri):
        patch.setattr(indexes, "_ensured", False)
        patch.setattr(transactions, "_supported", None)
        mongoengine.disconnect()
        connect_database()
        try:
            with loopback() as base_url:
                yield LoopbackApp(base_url)
        finally:
            mongoengine.disconnect()
