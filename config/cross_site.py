"""What keeps a page on another site from acting here through a visitor's browser, with or
without a token: a browser sends a cross-site form or a `text/plain` fetch without asking the
service first (no CORS preflight), and carries whatever the browser holds for this host.

Two checks. A JSON route reads a body only when it says it is JSON (a cross-site page cannot
send `application/json` without a preflight, which this service never answers); a request
without a body needs no type, as clients send body-less POSTs and DELETEs. And a request
that changes state is refused when the browser says it comes from another site
(`Sec-Fetch-Site`) or from another origin (`Origin`): the form routes (`POST /generate`, an
edit's upload) take what an HTML form sends, so only these headers tell such a post apart.
Clients that are not browsers send neither header and pass.
"""

from collections.abc import Callable
from urllib.parse import urlsplit

from django.http import HttpRequest, HttpResponse
from ninja.parser import Parser
from ninja.types import DictStrAny

from apikeys.auth import public_origin
from core.errors import ServiceError, error_response

CHANGES_STATE = {"POST", "PUT", "PATCH", "DELETE"}
# Sec-Fetch-Site values of a request the user or this origin made ("none": typed, bookmarked).
OWN_SITE = {"same-origin", "none"}


class BodyNotJson(ServiceError):
    status = 415
    message = "Content-Type: a request body here must be JSON ('Content-Type: application/json')"


def is_json(content_type: str) -> bool:
    kind = content_type.split(";", 1)[0].strip().lower()
    return kind == "application/json" or (kind.startswith("application/") and "+json" in kind)


class JsonOnlyParser(Parser):
    """Ninja's JSON body parser, refusing a body that does not declare itself JSON. Ninja
    turns a parser's exception into a 400; config.api answers this one as its own 415."""

    def parse_body(self, request: HttpRequest) -> DictStrAny:
        if not is_json(request.headers.get("Content-Type", "")):
            raise BodyNotJson()
        return super().parse_body(request)


def from_another_site(request: HttpRequest, own_host: str) -> bool:
    """Whether the browser says the request comes from another site or origin."""
    fetch_site = request.headers.get("Sec-Fetch-Site")
    if fetch_site is not None and fetch_site.lower() not in OWN_SITE:
        return True
    origin = request.headers.get("Origin")
    if origin is None:
        return False
    return origin == "null" or urlsplit(origin).netloc.lower() != own_host.lower()


class CrossSiteMiddleware:
    """403 to a state-changing request a browser made for a page on another site."""

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
