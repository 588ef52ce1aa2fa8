"""The app in this process for the real client libraries: the openai SDK over httpx's WSGI
transport, and a loopback port for clients that speak only over a socket (webuiapi's requests
session). Both reach the same Django app and backend as the test's own calls (tests/support/
loaders.py `serve`), so no gunicorn is started."""

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import httpx2
import openai
from django.core.handlers.wsgi import WSGIHandler
from django.core.servers.basehttp import ThreadedWSGIServer, WSGIRequestHandler

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


@contextmanager
def loopback() -> Iterator[str]:
    """The app on a free 127.0.0.1 port, served from threads of this process (Django's own
    test server); yields its base URL."""
    server = ThreadedWSGIServer(("127.0.0.1", 0), _QuietHandler, allow_reuse_address=False)
    server.set_app(WSGIHandler())
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(10)
