"""Chunked request bodies (no Content-Length), read like any other.

Django reads exactly Content-Length bytes, so it saw an empty body. This wrapper reads at most
one byte past MAX_BODY_BYTES and sets the length."""

import io
from collections.abc import Callable, Iterable
from typing import Any


class ChunkedBodies:
    def __init__(self, app: Callable[..., Iterable[bytes]], *, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    def __call__(self, environ: dict[str, Any], start_response: Callable) -> Iterable[bytes]:
        chunked = "chunked" in environ.get("HTTP_TRANSFER_ENCODING", "").lower()
        if chunked and not environ.get("CONTENT_LENGTH"):
            body = environ["wsgi.input"].read(self.max_bytes + 1)
            environ["wsgi.input"] = io.BytesIO(body)
            environ["CONTENT_LENGTH"] = str(len(body))
        return self.app(environ, start_response)
