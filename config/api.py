"""The project's one NinjaAPI; each app adds its routers and its own exception handlers.

The exceptions every app shares are answered here, in the path's registered error shape."""

from typing import Any

from django.conf import settings
from django.core.exceptions import RequestDataTooBig, TooManyFieldsSent, TooManyFilesSent
from django.http import Http404, HttpRequest, HttpResponse
from ninja import NinjaAPI
from ninja.errors import HttpError, ValidationError
from ninja.openapi.schema import OpenAPISchema

from config.cross_site import JsonOnlyParser
from core.errors import (
    NOT_FOUND,
    FieldError,
    ServiceError,
    error_response,
    shape_of,
    unexpected_error,
)
from core.openapi import declare_method_not_allowed
from core.version import app_version


class ProjectAPI(NinjaAPI):
    """Its OpenAPI also states the middleware's 405 for every path."""

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
    """`{field, message}` pairs a client can show as they are."""
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
        message = shape_of(request.path).unauthorized_message  # the A1111 routes' names Basic
        response = error_response(request, 401, message)
        # Bearer alone, even where Basic is taken. A Basic challenge makes a browser send the
        # password to this host with every request, another site's too.
        response["WWW-Authenticate"] = "Bearer"
        return response
    return error_response(request, exc.status_code, exc.message)


@api.exception_handler(FieldError)
def on_field_error(request: HttpRequest, exc: FieldError) -> HttpResponse:
    details = [{"field": exc.field, "message": exc.rule}]
    return error_response(request, 400, _describe(details), details=details)


@api.exception_handler(ServiceError)
def on_service_error(request: HttpRequest, exc: ServiceError) -> HttpResponse:
    return error_response(request, exc.status, exc.message, retry_after=exc.retry_after)


@api.exception_handler(Http404)
def on_not_found(request: HttpRequest, exc: Http404) -> HttpResponse:
    return error_response(request, 404, NOT_FOUND)


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
    return unexpected_error(request, exc)
