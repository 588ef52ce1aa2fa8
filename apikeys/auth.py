"""Optional bearer-token protection of everything that changes state or costs compute, and
who a client is.

With neither API_TOKEN nor API_KEYS set the service stays open (and says so in the log at
every start and in GET /api); /health and /model/status always stay open for the platform's probes
and the gate. API_TOKEN is one admin key from the environment; API_KEYS adds the named keys of
MongoDB (apikeys; docs/keys.md). Wherever the token is taken, a live key is too.
The OpenAI routes take the token as a bearer token (the SDK's api_key); the AUTOMATIC1111
routes also as HTTP Basic's password (A1111 clients only know `--api-auth user:password`),
though their 401 offers Bearer alone (a browser caches a Basic password it was asked for).

Forwarded headers (X-Forwarded-For, -Proto, -Host) are believed only from TRUSTED_PROXIES:
anyone else could write them to pass for another client or to point image links elsewhere.
"""

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
    """Whether anything is checked: API_TOKEN set, named keys on, or both."""
    return bool(settings.API_TOKEN) or settings.API_KEYS


def caller_for(secret: str) -> Caller | None:
    """Who presents this secret: the API_TOKEN (compared here, MongoDB never asked), else a
    live named key (read from MongoDB on every request; its errors become a 503, not a 401,
    since the key may well be good)."""
    if _is_token(secret):
        return TOKEN_CALLER
    if settings.API_KEYS:
        try:
            return key_caller(secret=secret)
        except PyMongoError as error:
            log.warning("key store unreachable: %s", type(error).__name__)
            raise KeyStoreUnreachable() from None
    return None


# What a route needs of a named key (API_TOKEN and admin keys may call every route).
USE = "api"  # the routes of ordinary use: a key of --scope api
ADMIN = "admin"  # pulling the model, deleting every todo: an admin
METRICS = "metrics"  # GET /metrics: an admin or a key of --scope metrics (a scraper's)

_NEEDS = {
    USE: "an ordinary key, an admin key or API_TOKEN (a --scope metrics key reads /metrics only)",
    ADMIN: "an admin key or API_TOKEN",
    METRICS: "an admin key, a key of --scope metrics or API_TOKEN",
}


def with_power(caller: Caller | None, power: str) -> Caller | None:
    """The caller when it may call a route that needs `power`; a known key that may not is
    refused with 403 naming what the route needs."""
    if caller is None or caller.admin:
        return caller
    may = caller.scope == METRICS if power == METRICS else power == USE and caller.scope == USE
    if not may:
        raise KeyLacksPower(_NEEDS[power])
    return caller


# What an open service's routes authenticate as: not a Caller, so request_caller says None.
OPEN = object()


class _WhileProtected:
    """Checks its scheme only while the service is protected (API_TOKEN or API_KEYS, read at
    each request, so a changed setting takes effect in the running process); on an open
    service every request passes as OPEN. The OpenAPI schema names the scheme only while it
    is checked."""

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
    """HTTP Basic with the token or key as the password and any user name."""

    def authenticate(self, request: HttpRequest, username: str, password: str) -> Caller | None:
        return with_power(caller_for(password), USE)


def token_required(power: str = USE) -> list[HttpBearer]:
    """The `auth=` of protected routes: a token or key when either is configured at the
    request, else none; `power` is what the route needs of a named key (USE, ADMIN,
    METRICS)."""
    return [ApiToken(power)]


def token_or_basic_required() -> list[HttpBearer | HttpBasicAuth]:
    """The `auth=` of the protocol routes: the token or a key as a bearer token or as Basic's
    password. With neither configured nothing is checked, so the bare `Basic ` header that
    clients send when they have no credentials changes nothing."""
    return [ApiToken(), ApiTokenAsPassword()]


def request_caller(request: HttpRequest) -> Caller | None:
    """The caller a protected route authenticated; None on an open service (everyone is
    everyone's)."""
    auth = getattr(request, "auth", None)
    return auth if isinstance(auth, Caller) else None


def owner_key(request: HttpRequest) -> str | None:
    """The name of the key a request's jobs and images belong to ("API_TOKEN" for the
    token); None on an open service."""
    caller = request_caller(request)
    return None if caller is None else caller.name


def queue_limit(request: HttpRequest) -> int | None:
    """The --max-queued of the request's key (None: none, the token's, an open service):
    counted by the job board in the step that queues each job (JobBoard.submit). A named key
    holds at most KEY_QUEUE_SHARE % of GEN_QUEUE_MAX whatever its own, so one key cannot
    take the whole queue from the others."""
    caller = request_caller(request)
    if caller is None or caller == TOKEN_CALLER:
        return None if caller is None else caller.max_queued
    share = max(1, settings.GEN_QUEUE_MAX * settings.KEY_QUEUE_SHARE // 100)
    return share if caller.max_queued is None else min(caller.max_queued, share)


def stream_key(request: HttpRequest) -> str | None:
    """The named key whose open event streams are counted against KEY_STREAMS_MAX; None for
    the token and an open service, which only EVENT_STREAMS_MAX bounds."""
    caller = request_caller(request)
    return None if caller is None or caller == TOKEN_CALLER else caller.name


def seen_by(request: HttpRequest) -> str | None:
    """Whose jobs and images a request may see and touch: a key that is not an admin, its
    own (the name); an admin key, API_TOKEN or an open service, everyone's (None)."""
    caller = request_caller(request)
    return None if caller is None or caller.admin else caller.name


def sees_owners(request: HttpRequest) -> bool:
    """Whether answers name the key each job and image belongs to (`owner`): only to an admin
    key or API_TOKEN while named keys are on. A key that is not an admin sees only its own
    (naming them tells it nothing), and with API_TOKEN alone every job is the token's."""
    caller = request_caller(request)
    return settings.API_KEYS and caller is not None and caller.admin


OPEN_WARNING = (
    "API_TOKEN is not set and API_KEYS is off: anyone who reaches this service can pull the "
    "model, generate images, read every prompt and image and change todos; set API_TOKEN to "
    "close it (docs/operations.md, Access control)"
)


def open_warning() -> str | None:
    """What GET /api and every start say while nothing is checked; None once protected."""
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
    """The client's address: the peer's, or, when the peer is a trusted proxy, the nearest
    address in X-Forwarded-For that is not one of ours (each proxy appends the address it
    received the request from; those left of an untrusted one could be made up)."""
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
    """Who "this client" is for the protocol routes (a retry joining its twin, an A1111
    interrupt stopping only its own jobs): the credential it presents (the Authorization
    header, whole: a Basic user name counts) and its address. A digest, so no token is kept."""
    credential = request.headers.get("Authorization", "")
    text = f"{credential}\n{client_address(request)}"
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def public_origin(request: HttpRequest) -> str:
    """`scheme://host` as the client reached the service: behind a trusted proxy (Azure's
    ingress ends TLS and speaks plain HTTP to the app) its X-Forwarded-Proto and
    X-Forwarded-Host, the latter only when ALLOWED_HOSTS allows it."""
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
