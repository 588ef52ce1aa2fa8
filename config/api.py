"""The project's one NinjaAPI: each app adds its routers; every exception becomes an answer here."""

import logging
from typing import Any

from django.conf import settings
from django.core.exceptions import RequestDataTooBig, TooManyFieldsSent, TooManyFilesSent
from django.http import Http404, HttpRequest, HttpResponse
from kombu.exceptions import OperationalError
from ninja import NinjaAPI
from ninja.errors import HttpError, ValidationError
from ninja.openapi.schema import OpenAPISchema
from pymongo.errors import ConnectionFailure, PyMongoError, ServerSelectionTimeoutError
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from config import metrics
from config.cross_site import JsonOnlyParser
from config.errors import (
    DATABASE_UNREACHABLE,
    NOT_FOUND,
    FieldError,
    ServiceError,
    error_response,
    takes_basic_auth,
)
from config.logs import first_part
from config.openapi import declare_method_not_allowed
from config.version import app_version

log = logging.getLogger(__name__)


class ProjectAPI(NinjaAPI):
    """The NinjaAPI whose OpenAPI document also states what the middleware answers for every
    path (405 to a method it does not take)."""

    def get_openapi_schema(
        self, *, path_prefix: str | None = None, path_params: dict[str, Any] | None = None
    ) -> OpenAPISchema:
        schema = super().get_openapi_schema(path_prefix=path_prefix, path_params=path_params)
        declare_method_not_allowed(schema)
        return schema


api = ProjectAPI(
    title="imagegen + todos",
    version=app_version(),
    # Shown at the top of the API docs (/api/docs), where it leads back to the page.
    description="A self-hosted text-to-image service and a todo record API. "
    "The page for people: [/ui/](/ui/).",
    openapi_url="/api/openapi.json",
    docs_url="/api/docs",
    parser=JsonOnlyParser(),
)

# Ninja puts the request part and the parameter's name before the field path.
_LOCATION_PREFIXES = {"body", "form", "query", "path", "header", "cookie", "file"}


def _field_name(loc: tuple[Any, ...] | list[Any], param_names: set[str]) -> str:
    parts = [str(p) for p in loc]
    if parts and parts[0] in _LOCATION_PREFIXES:
        parts = parts[1:]
    if parts and parts[0] in param_names:
        parts = parts[1:]
    return ".".join(parts) or "body"


def validation_details(errors: list[dict[str, Any]], param_names: set[str]) -> list[dict[str, str]]:
    """Turns pydantic's errors into `{field, message}` pairs a client can show as they are."""
    details = []
    for err in errors:
        message = str(err.get("msg", "is invalid"))
        if message.startswith("Value error, "):
            message = message[len("Value error, ") :]
        details.append({"field": _field_name(err.get("loc", ()), param_names), "message": message})
    return details


def _describe(details: list[dict[str, str]]) -> str:
    return "Invalid request: " + "; ".join(f"{d['field']}: {d['message']}" for d in details)


@api.exception_handler(ValidationError)
def on_validation_error(request: HttpRequest, exc: ValidationError) -> HttpResponse:
    details = validation_details(exc.errors, {"payload", "form"})
    return error_response(request, 400, _describe(details), details=details)


@api.exception_handler(HttpError)
def on_http_error(request: HttpRequest, exc: HttpError) -> HttpResponse:
    if isinstance(exc.__cause__, ServiceError):  # the body parser's refusal (config.cross_site)
        return on_service_error(request, exc.__cause__)
    if exc.status_code == 400:  # Ninja raises this only for a body that is not JSON
        details = [{"field": "body", "message": "must be a JSON document"}]
        return error_response(request, 400, _describe(details), details=details)
    if exc.status_code == 401:
        message = "A valid 'Authorization: Bearer <token>' is required"
        if takes_basic_auth(request.path):  # webuiapi and A1111 front ends send Basic
            message = (
                "A valid 'Authorization: Bearer <token>' (or Basic, with the token as the "
                "password) is required"
            )
        response = error_response(request, 401, message)
        # Bearer alone, even where Basic is taken: a Basic challenge makes a browser ask for
        # a password and then send it with every request to this host, another site's too.
        response["WWW-Authenticate"] = "Bearer"
        return response
    return error_response(request, exc.status_code, exc.message)


@api.exception_handler(FieldError)
def on_field_error(request: HttpRequest, exc: FieldError) -> HttpResponse:
    details = [{"field": exc.field, "message": exc.rule}]
    return error_response(request, 400, _describe(details), details=details)


@api.exception_handler(ServiceError)
def on_service_error(request: HttpRequest, exc: ServiceError) -> HttpResponse:
    message = exc.message
    if exc.may_follow_a_queued_job and is_generating(request):
        message = f"{message}. {MAY_HAVE_QUEUED}"
    return error_response(request, exc.status, message, retry_after=exc.retry_after)


@api.exception_handler(Http404)
def on_not_found(request: HttpRequest, exc: Http404) -> HttpResponse:
    return error_response(request, 404, NOT_FOUND)


WRITES = {"POST", "PUT", "PATCH", "DELETE"}
UNCONFIRMED = (
    "The database did not confirm this write in time: it may or may not have been saved. "
    "Check before sending it again, or send it again with the same Idempotency-Key"
)


@api.exception_handler(PyMongoError)
def on_database_error(request: HttpRequest, exc: PyMongoError) -> HttpResponse:
    """A database that does not answer in time is a 503. A write that never left this
    process (no server to send it to) can simply be retried; one that was sent may have
    been applied, and the answer must not tell the client to just try again (its retry
    would then meet its own todo as a duplicate)."""
    if not (exc.timeout or isinstance(exc, ConnectionFailure)):
        return on_unexpected(request, exc)
    log.warning("database unreachable: %s", first_part(exc))
    metrics.TODO_REFUSED.labels(reason="unreachable").inc()
    sent = not isinstance(exc, ServerSelectionTimeoutError)
    message = UNCONFIRMED if sent and request.method in WRITES else DATABASE_UNREACHABLE
    return error_response(request, 503, message, retry_after=5)


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


@api.exception_handler(RedisConnectionError)
@api.exception_handler(RedisTimeoutError)
@api.exception_handler(OperationalError)
def on_job_store_error(request: HttpRequest, exc: Exception) -> HttpResponse:
    """Distributed mode's Redis (the jobs and the broker) not answering: a 503 the client
    may retry, as for the todos' database; the connections come back by themselves when
    Redis does, so the service needs no restart."""
    log.warning("job store unreachable: %s", first_part(exc))
    message = GENERATION_UNCONFIRMED if is_generating(request) else JOB_STORE_UNREACHABLE
    return error_response(request, 503, message, retry_after=5)


@api.exception_handler(RequestDataTooBig)
def on_body_too_big(request: HttpRequest, exc: RequestDataTooBig) -> HttpResponse:
    return error_response(request, 413, "The request body is too large")


@api.exception_handler(TooManyFieldsSent)
def on_too_many_fields(request: HttpRequest, exc: TooManyFieldsSent) -> HttpResponse:
    limit = settings.DATA_UPLOAD_MAX_NUMBER_FIELDS
    details = [{"field": "request", "message": f"has more than {limit} fields"}]
    return error_response(request, 400, _describe(details), details=details)


@api.exception_handler(TooManyFilesSent)
def on_too_many_files(request: HttpRequest, exc: TooManyFilesSent) -> HttpResponse:
    limit = settings.DATA_UPLOAD_MAX_NUMBER_FILES
    details = [{"field": "request", "message": f"has more than {limit} file parts"}]
    return error_response(request, 400, _describe(details), details=details)


@api.exception_handler(Exception)
def on_unexpected(request: HttpRequest, exc: Exception) -> HttpResponse:
    log.exception("unhandled error on %s %s", request.method, request.path)
    return error_response(request, 500, "Internal server error")
