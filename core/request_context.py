"""What a log line knows about the work it is part of: the request's id, its route, the job
and the worker running it. Kept in context variables so any module logs with them without
passing them along (core.logs' JSON formatter reads them), and so a job carries its
request's id from the web process into its record and into the worker's log lines.

An X-Request-ID from a client or proxy is kept when it is 1 to 128 characters of letters,
digits, `.`, `_` and `-` (anything else could forge log lines or grow without bound); any
other value, or none, gets a generated one.
"""

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
    """The client's id when it is a valid one, else a new one (32 hex digits)."""
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
    """While a job runs (its thread, or a worker process): its log lines carry its id, its
    request's id and, in a worker, the worker's name."""
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
