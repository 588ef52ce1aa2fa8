"""Optional bearer-token protection of everything that changes state or costs compute.

With API_TOKEN unset the service stays open (and says so in the log at start when DEBUG is
off); /health and /model/status always stay open for the platform's probes and the gate.
"""

import hmac
import logging

from django.conf import settings
from django.http import HttpRequest
from ninja.security import HttpBearer

log = logging.getLogger(__name__)


class ApiToken(HttpBearer):
    def authenticate(self, request: HttpRequest, token: str) -> str | None:
        expected = settings.API_TOKEN
        if expected and hmac.compare_digest(token.encode(), expected.encode()):
            return "api-token"
        return None


def token_required() -> list[HttpBearer] | None:
    """The `auth=` of protected routes: the token when one is configured, else none."""
    return [ApiToken()] if settings.API_TOKEN else None


def warn_if_open() -> None:
    if not settings.API_TOKEN and not settings.DEBUG:
        log.warning(
            "API_TOKEN is not set: anyone who reaches this service can pull the model, "
            "generate images and change todos"
        )
