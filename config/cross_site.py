"""What keeps another site's page from acting here through a visitor's browser.

Browsers send cross-site forms and `text/plain` fetches without a CORS preflight. So JSON
routes read only bodies typed as JSON, which needs a preflight this service never answers. A
request without a body needs no type. A state-changing request is refused when
`Sec-Fetch-Site` or `Origin` says it is cross-site. Only these headers tell a hostile form
post apart. Non-browser clients send neither and pass."""

from collections.abc import Callable
from urllib.parse import urlsplit

from django.http import HttpRequest, HttpResponse
from ninja.parser import Parser
from ninja.types import DictStrAny

from apikeys.auth import public_origin
from core.errors import ServiceError, error_response

CHANGES_STATE = {"POST", "PUT", "PATCH", "DELETE"}
# Sec-Fetch-Site values of requests the user or this origin made ("none": typed or bookmarked).
OWN_SITE = {"same-origin", "none"}


class BodyNotJson(ServiceError):
    status = 415
    message = "Content-Type: a request body here must be JSON ('Content-Type: application/json')"


def is_json(content_type: str) -> bool:
    kind = content_type.split(";", 1)[0].strip().lower()
    return kind == "application/json" or (kind.startswith("application/") and "+json" in kind)


class JsonOnlyParser(Parser):
    """Refuses a body that does not declare itself JSON; config.api answers it 415."""

    def parse_body(self, request: HttpRequest) -> DictStrAny:
        if not is_json(request.headers.get("Content-Type", "")):
            raise BodyNotJson()
        return super().parse_body(request)


def from_another_site(request: HttpRequest, own_host: str) -> bool:
    """Whether the browser says another site or origin made the request."""
    fetch_site = request.headers.get("Sec-Fetch-Site")
    if fetch_site is not None and fetch_site.lower() not in OWN_SITE:
        return True
    origin = request.headers.get("Origin")
    if origin is None:
        return False
    return origin == "null" or urlsplit(origin).netloc.lower() != own_host.lower()


class CrossSiteMiddleware:
    """403 to a state-changing request a browser made for another site's page."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        if request.method in CHANGES_STATE:
            own_host = urlsplit(public_origin(request)).netloc
            if from_another_site(request, own_host):
                return error_response(
                    request,
                    403,
                    "A browser request from another site may not change anything here "
                    "(Origin / Sec-Fetch-Site)",
                )
        return self.get_response(request)
