"""Request bodies sent with `Transfer-Encoding: chunked` (no Content-Length), read like any other.

gunicorn de-chunks such a body, but Django reads exactly Content-Length bytes, so without one it
saw an empty body ("body: Field required"). This WSGI wrapper reads the body (at most one byte
past MAX_BODY_BYTES) and hands Django the bytes with their length; an oversized body then gets
the usual 413 from Django's own size check.
"""

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
