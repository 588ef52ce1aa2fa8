"""Optional token protection of what changes state or costs compute, and who a client is.

Without API_TOKEN and API_KEYS the service stays open, and says so. /health and /model/status
stay open for probes. A live key goes wherever the token does (docs/keys.md). Forwarded
headers count only from TRUSTED_PROXIES, or anyone could pass for another client."""

import hashlib
import hmac
import ipaddress
import logging

from django.conf import settings
from django.http import HttpRequest
from django.http.request import split_domain_port, validate_host
from ninja.security import HttpBasicAuth, HttpBearer
from pymongo.errors import PyMongoError

from apikeys.errors import KeyLacksPower, KeyStoreUnreachable
from apikeys.selectors import TOKEN_CALLER, Caller, key_caller

log = logging.getLogger(__name__)


def _is_token(value: str) -> bool:
    expected = settings.API_TOKEN
    return bool(expected) and hmac.compare_digest(value.encode(), expected.encode())


def protected() -> bool:
    """API_TOKEN set, named keys on, or both."""
    return bool(settings.API_TOKEN) or settings.API_KEYS


def caller_for(secret: str) -> Caller | None:
    """The API_TOKEN, else a live named key, read from MongoDB each request.

    MongoDB errors become a 503, not a 401: the key may well be good."""
    if _is_token(secret):
        return TOKEN_CALLER
    if settings.API_KEYS:
        try:
            return key_caller(secret=secret)
        except PyMongoError as error:
            log.warning("key store unreachable: %s", type(error).__name__)
            raise KeyStoreUnreachable() from None
    return None


# What a route needs of a named key; API_TOKEN and admin keys may call every route.
USE = "api"  # the routes of ordinary use: a key of --scope api
ADMIN = "admin"  # pulling the model, deleting every todo: an admin
METRICS = "metrics"  # GET /metrics: an admin or a key of --scope metrics (a scraper's)

_NEEDS = {
    USE: "an ordinary key, an admin key or API_TOKEN (a --scope metrics key reads /metrics only)",
    ADMIN: "an admin key or API_TOKEN",
    METRICS: "an admin key, a key of --scope metrics or API_TOKEN",
}


def with_power(caller: Caller | None, power: str) -> Caller | None:
    """A known key without `power` is refused with 403 naming what the route needs."""
    if caller is None or caller.admin:
        return caller
    may = caller.scope == METRICS if power == METRICS else power == USE and caller.scope == USE
    if not may:
        raise KeyLacksPower(_NEEDS[power])
    return caller


# Not a Caller, so request_caller says None.
OPEN = object()


class _WhileProtected:
    """Checks its scheme only while the service is protected, so a changed setting applies at
    once."""

    def __call__(self, request: HttpRequest) -> object | None:
        if not protected():
            return OPEN
        return super().__call__(request)  # type: ignore[misc]

    def __getattribute__(self, name: str) -> object:
        if name == "openapi_security_schema" and not protected():
            raise AttributeError(name)  # an open service documents no scheme
        return super().__getattribute__(name)


class ApiToken(_WhileProtected, HttpBearer):
    """The token or a key as a bearer token."""

    def __init__(self, power: str = USE) -> None:
        super().__init__()
        self.power = power

    def authenticate(self, request: HttpRequest, token: str) -> Caller | None:
        return with_power(caller_for(token), self.power)


class ApiTokenAsPassword(_WhileProtected, HttpBasicAuth):
    """HTTP Basic, the token or key as the password, any user name."""

    def authenticate(self, request: HttpRequest, username: str, password: str) -> Caller | None:
        return with_power(caller_for(password), USE)


def token_required(power: str = USE) -> list[HttpBearer]:
    """The `auth=` of protected routes; `power` is what a named key needs (USE, ADMIN, METRICS)."""
    return [ApiToken(power)]


def token_or_basic_required() -> list[HttpBearer | HttpBasicAuth]:
    """The protocol routes' `auth=`: bearer or Basic's password. An open service ignores a bare
    `Basic `."""
    return [ApiToken(), ApiTokenAsPassword()]


def request_caller(request: HttpRequest) -> Caller | None:
    """None on an open service, where everyone is everyone's."""
    auth = getattr(request, "auth", None)
    return auth if isinstance(auth, Caller) else None


def owner_key(request: HttpRequest) -> str | None:
    """The key's name, "API_TOKEN" for the token; None on an open service."""
    caller = request_caller(request)
    return None if caller is None else caller.name


def queue_limit(request: HttpRequest) -> int | None:
    """The key's --max-queued, counted in the step that queues each job.

    At most KEY_QUEUE_SHARE % of GEN_QUEUE_MAX, so one key cannot take the queue."""
    caller = request_caller(request)
    if caller is None or caller == TOKEN_CALLER:
        return None if caller is None else caller.max_queued
    share = max(1, settings.GEN_QUEUE_MAX * settings.KEY_QUEUE_SHARE // 100)
    return share if caller.max_queued is None else min(caller.max_queued, share)


def stream_key(request: HttpRequest) -> str | None:
    """The named key counted against KEY_STREAMS_MAX; None where EVENT_STREAMS_MAX alone bounds."""
    caller = request_caller(request)
    return None if caller is None or caller == TOKEN_CALLER else caller.name


def seen_by(request: HttpRequest) -> str | None:
    """A non-admin key sees its own (its name); admins, API_TOKEN and an open service see all
    (None)."""
    caller = request_caller(request)
    return None if caller is None or caller.admin else caller.name


def sees_owners(request: HttpRequest) -> bool:
    """Whether answers name each job's key: only to admins while named keys are on."""
    caller = request_caller(request)
    return settings.API_KEYS and caller is not None and caller.admin


OPEN_WARNING = (
    "API_TOKEN is not set and API_KEYS is off: anyone who reaches this service can pull the "
    "model, generate images, read every prompt and image and change todos; set API_TOKEN to "
    "close it (docs/operations.md, Access control)"
)


def open_warning() -> str | None:
    """What GET /api and every start say while nothing is checked."""
    return None if protected() else OPEN_WARNING


def warn_if_open() -> None:
    if warning := open_warning():
        log.warning(warning)
    elif settings.API_KEYS:
        log.info("API keys: named keys from MongoDB are taken (read on every request)")


def _trusted(address: str) -> bool:
    try:
        ip = ipaddress.ip_address(address.strip())
    except ValueError:
        return False
    return any(ip in network for network in settings.TRUSTED_PROXIES)


def _from_proxy(request: HttpRequest) -> bool:
    return _trusted(request.META.get("REMOTE_ADDR", ""))


def client_address(request: HttpRequest) -> str:
    """The peer, or behind a trusted proxy the nearest X-Forwarded-For entry not ours."""
    address = request.META.get("REMOTE_ADDR", "")
    if not _from_proxy(request):
        return address
    forwarded = [a.strip() for a in request.headers.get("X-Forwarded-For", "").split(",")]
    for hop in reversed([a for a in forwarded if a]):
        address = hop
        if not _trusted(hop):
            break
    return address


def client_identity(request: HttpRequest) -> str:
    """Who "this client" is for twins and interrupts: its Authorization header and address.

    A digest, so no token is kept."""
    credential = request.headers.get("Authorization", "")
    text = f"{credential}\n{client_address(request)}"
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def public_origin(request: HttpRequest) -> str:
    """`scheme://host` as the client reached the service.

    Behind a trusted proxy, from X-Forwarded-Proto and X-Forwarded-Host (if ALLOWED_HOSTS
    allows it)."""
    scheme, host = request.scheme, request.get_host()
    if _from_proxy(request):
        proto = request.headers.get("X-Forwarded-Proto", "").split(",")[0].strip().lower()
        if proto in ("http", "https"):
            scheme = proto
        forwarded_host = request.headers.get("X-Forwarded-Host", "").split(",")[0].strip()
        domain, _port = split_domain_port(forwarded_host)
        if domain and validate_host(domain, settings.ALLOWED_HOSTS):
            host = forwarded_host
    return f"{scheme}://{host}"
