"""What a log line knows about its work: request id, route, job and worker.

Context variables, so no call passes them along. A client's X-Request-ID must be 1 to 128
characters of `[A-Za-z0-9._-]`. Anything else could forge log lines."""

import contextlib
import re
import secrets
from collections.abc import Iterator
from contextvars import ContextVar, Token
from typing import Any

REQUEST_ID_HEADER = "X-Request-ID"
_VALID_ID = re.compile(r"[A-Za-z0-9._-]{1,128}")

request_id: ContextVar[str | None] = ContextVar("request_id", default=None)
route: ContextVar[str | None] = ContextVar("route", default=None)
job_id: ContextVar[str | None] = ContextVar("job_id", default=None)
worker: ContextVar[str | None] = ContextVar("worker", default=None)


def accepted_request_id(sent: str | None) -> str:
    """The client's id when valid, else 32 new hex digits."""
    if sent is not None and _VALID_ID.fullmatch(sent):
        return sent
    return secrets.token_hex(16)


def is_request_id(value: str) -> bool:
    return bool(_VALID_ID.fullmatch(value))


def current_request_id() -> str | None:
    return request_id.get()


def surface(path: str) -> str:
    """Which protocol a path belongs to, for imagegen_jobs_submitted_total."""
    if path.startswith("/v1/"):
        return "openai"
    if path.startswith("/sdapi/"):
        return "a1111"
    return "native"


_path: ContextVar[str] = ContextVar("path", default="")


def current_surface() -> str:
    return surface(_path.get())


@contextlib.contextmanager
def request_scope(*, rid: str, path: str) -> Iterator[None]:
    tokens: list[tuple[ContextVar[Any], Token[Any]]] = [
        (request_id, request_id.set(rid)), (_path, _path.set(path)), (route, route.set(None)),
    ]  # fmt: skip
    try:
        yield
    finally:
        _reset(tokens)


@contextlib.contextmanager
def job_scope(*, job: str, rid: str | None, name: str | None = None) -> Iterator[None]:
    """A job's log lines carry its id, its request's id and the worker's name."""
    tokens: list[tuple[ContextVar[Any], Token[Any]]] = [
        (job_id, job_id.set(job)), (request_id, request_id.set(rid)),
    ]  # fmt: skip
    if name is not None:
        tokens.append((worker, worker.set(name)))
    try:
        yield
    finally:
        _reset(tokens)


def _reset(tokens: list[tuple[ContextVar[Any], Token[Any]]]) -> None:
    for var, token in reversed(tokens):
        var.reset(token)
