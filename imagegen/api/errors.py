"""The image service's error answers: OpenAI's error object under /v1/, the AUTOMATIC1111
routes' 401 that names Basic, and the job store's outages. The app registers the shapes
when it is ready; the API's assembly installs the handlers (config/urls.py)."""

import logging
from collections.abc import Callable
from typing import Any

from django.http import HttpRequest, HttpResponse
from kombu.exceptions import OperationalError
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from core.errors import ErrorShape, error_response, register_error_shape
from core.logs import first_part
from imagegen.errors import JobStoreBusy

log = logging.getLogger("config.api")  # the name log searches know these lines by

# OpenAI's error `code` by status, as its API writes them (the SDK picks its exception
# class by status alone).
OPENAI_CODES = {401: "invalid_api_key", 404: "not_found", 503: "service_unavailable",
                504: "timeout"}  # fmt: skip


def openai_error(status: int, message: str, details: list[dict[str, str]] | None) -> dict:
    if status >= 500:
        kind = "server_error"
    else:
        kind = "rate_limit_error" if status == 429 else "invalid_request_error"
    error: dict[str, Any] = {
        "message": message,
        "type": kind,
        "param": details[0]["field"] if details else None,
        "code": OPENAI_CODES.get(status),
    }
    if details is not None:  # every failing field, as the service's other answers list them
        error["details"] = details
    return error


class OpenAIErrorShape(ErrorShape):
    """`{"error": {"message", "type", "param", "code"}}` (with `details` on a validation
    error), and the openai SDK's retry header."""

    def body(self, status: int, message: str, details: list[dict[str, str]] | None) -> dict:
        return {"error": openai_error(status, message, details)}

    def finish(self, response: HttpResponse, retry_after: int | None) -> None:
        # The openai SDK retries 408, 409, 429 and 5xx answers (twice, by default) unless
        # this header says otherwise. The rule: an answer with Retry-After (a full queue, a
        # load under way, a lost worker, the job store unreachable) is worth retrying then;
        # any other would only repeat work (a generation that timed out or raised starts
        # over, a 409 without weights stays one).
        response["x-should-retry"] = "false" if retry_after is None else "true"


class A1111ErrorShape(ErrorShape):
    """The image service's shape; its 401 names Basic too, which webuiapi and AUTOMATIC1111
    front ends send (the token as the password)."""

    unauthorized_message = (
        "A valid 'Authorization: Bearer <token>' (or Basic, with the token as the "
        "password) is required"
    )


def register_error_shapes() -> None:
    register_error_shape(OpenAIErrorShape(), prefixes=("/v1/",))
    register_error_shape(A1111ErrorShape(), prefixes=("/sdapi/v1/",))


JOB_STORE_UNREACHABLE = "The job store (Redis) is unreachable; try again shortly"
# The routes that queue generations: a request of theirs cut off by the outage may have
# queued its job, which then runs on. The same Idempotency-Key on the retry joins that job
# (imagegen.services) instead of running it twice.
GENERATING = (
    "/generate", "/v1/images/generations", "/v1/images/edits", "/sdapi/v1/txt2img",
    "/sdapi/v1/img2img",
)  # fmt: skip
MAY_HAVE_QUEUED = (
    "The job may have been queued already: send the request again with the same "
    "Idempotency-Key to join that job instead of running it twice"
)
GENERATION_UNCONFIRMED = f"{JOB_STORE_UNREACHABLE}. {MAY_HAVE_QUEUED}"


def is_generating(request: HttpRequest) -> bool:
    return request.method == "POST" and request.path in GENERATING


def on_job_store_busy(request: HttpRequest, exc: JobStoreBusy) -> HttpResponse:
    """A service error that may come after the request's job was queued: a generating
    request's answer says how to retry without running the job twice."""
    message = exc.message
    if exc.may_follow_a_queued_job and is_generating(request):
        message = f"{message}. {MAY_HAVE_QUEUED}"
    return error_response(request, exc.status, message, retry_after=exc.retry_after)


def on_job_store_error(request: HttpRequest, exc: Exception) -> HttpResponse:
    """Distributed mode's Redis (the jobs and the broker) not answering: a 503 the client
    may retry, as for the todos' database; the connections come back by themselves when
    Redis does, so the service needs no restart."""
    log.warning("job store unreachable: %s", first_part(exc))
    message = GENERATION_UNCONFIRMED if is_generating(request) else JOB_STORE_UNREACHABLE
    return error_response(request, 503, message, retry_after=5)


EXCEPTION_HANDLERS: dict[type[Exception], Callable[[HttpRequest, Any], HttpResponse]] = {
    JobStoreBusy: on_job_store_busy,
    RedisConnectionError: on_job_store_error,
    RedisTimeoutError: on_job_store_error,
    OperationalError: on_job_store_error,
}
