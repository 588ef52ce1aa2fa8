"""What a failed pull tells the person who pressed Pull, ran the gate, or ran pull_model.

The raw exception ("ConnectError: [Errno -2] Name or service not known") tells a newcomer
neither what went wrong nor what to do. First-pull failures are few, and each has one fix: a
mirror or the offline demo, HF_TOKEN, MODEL_ID, free space. So the status `error` says that,
to every client. The raw cause stays at its end, so nothing searchable is lost."""

import errno
import re
import socket
from collections.abc import Iterator
from urllib.parse import urlsplit, urlunsplit

from huggingface_hub import constants
from huggingface_hub.errors import (
    GatedRepoError,
    HfHubHTTPError,
    RepositoryNotFoundError,
    RevisionNotFoundError,
)

from imagegen.model.extras import ExtraNotFound
from imagegen.model.hub import ModelSource
from imagegen.model.status import describe

DEMO = "./scripts/serve --demo"
UNREACHABLE_ADVICE = (
    "check this machine's network, set HF_ENDPOINT to a mirror of the hub that it can reach, "
    f"or try the offline demo ({DEMO})"
)
DISK_FULL = (errno.ENOSPC, errno.EDQUOT)
# The repo of a hub request (under the endpoint's own path, if it has one):
# .../api/models/<org>/<name>[/...] or .../<org>/<name>/resolve/...
_REPO_IN_PATH = re.compile(r"/api/models/([^/]+/[^/]+)(?:/|$)|/([^/]+/[^/]+)/resolve/")


def hub_address(source: ModelSource) -> str:
    """The hub a pull talks to (HF_ENDPOINT, else huggingface_hub's default), safe to show.

    /model/status is an open route, so a mirror's user name, password or query string is cut."""
    parts = urlsplit(source.endpoint or constants.ENDPOINT)
    host = parts.hostname or ""
    if ":" in host:  # an IPv6 literal
        host = f"[{host}]"
    netloc = f"{host}:{parts.port}" if parts.port else host
    return urlunsplit((parts.scheme, netloc, parts.path.rstrip("/"), "", ""))


def explain_pull_failure(exc: BaseException, source: ModelSource) -> str:
    """The status `error` for `exc`: what happened, what to do, then the raw cause.

    A failure of no known kind gets the raw cause alone."""
    cause = describe(exc)
    advice = _advice(exc, source)
    return f"{advice} Cause: {cause}" if advice else cause


def _chain(exc: BaseException) -> Iterator[BaseException]:
    """The exception and those it was raised from or during, outermost first.

    The libraries wrap the socket's error: httpx2's ConnectError wraps httpcore's, which wraps
    the OSError."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        yield current
        current = current.__cause__ or current.__context__


def _advice(exc: BaseException, source: ModelSource) -> str | None:
    if isinstance(exc, ExtraNotFound):
        return None  # it names the setting and what to do already (imagegen.model.extras)
    chain = list(_chain(exc))
    hub = hub_address(source)
    for error in chain:
        if isinstance(error, OSError) and error.errno in DISK_FULL:
            return _disk_full(error)
    for error in chain:
        if isinstance(error, HfHubHTTPError):
            return _http_refusal(error, hub, source)
    for error in chain:
        reason = _network_reason(error)
        if reason is not None:
            return f"The model hub at {hub} (HF_ENDPOINT) {reason}: {UNREACHABLE_ADVICE}."
    return None


def _network_reason(error: BaseException) -> str | None:
    """Why nothing came back from the hub, from the socket's own error."""
    if isinstance(error, socket.gaierror):
        return "is unreachable: its host name does not resolve"
    if isinstance(error, ConnectionRefusedError):
        return "is unreachable: nothing accepts connections there"
    if isinstance(error, TimeoutError):
        return "did not answer in time"
    if isinstance(error, ConnectionError):
        return "is unreachable: the connection failed"
    return None


def _http_refusal(error: HfHubHTTPError, hub: str, source: ModelSource) -> str | None:
    status = error.response.status_code
    repo = _repo_of(error) or source.model_id
    setting = _setting_of(repo, source)
    if isinstance(error, GatedRepoError):
        return (
            f"{repo} is a gated repo on the model hub at {hub} (HTTP {status}): sign in there, "
            f"accept its terms, and set HF_TOKEN to a token of that account."
        )
    if isinstance(error, RevisionNotFoundError):
        return (
            f"{repo} on the model hub at {hub} has no revision {source.revision} "
            f"(HTTP {status}): check MODEL_REVISION."
        )
    if isinstance(error, RepositoryNotFoundError):
        return (
            f"The model hub at {hub} has no repo {repo}, or it is private (HTTP {status}): "
            f"check {setting}; for a private repo, set HF_TOKEN to a token with access to it."
        )
    if status in (401, 403):
        refused = (
            "the HF_TOKEN set was refused or has no access"
            if source.token
            else ("set HF_TOKEN to a token with access to it")
        )
        return (
            f"The model hub at {hub} refused access to {repo} (HTTP {status}): {refused}; "
            "a gated repo also needs its terms accepted on the hub."
        )
    if status == 429:
        return (
            f"The model hub at {hub} is limiting requests (HTTP 429): pull again later "
            "(a HF_TOKEN raises the limit)."
        )
    if status >= 500:
        return (
            f"The model hub at {hub} failed (HTTP {status}), a fault on its side: pull again "
            "later, or set HF_ENDPOINT to a mirror of the hub."
        )
    return None


def _repo_of(error: HfHubHTTPError) -> str | None:
    found = _REPO_IN_PATH.search(error.response.request.url.path)
    return (found.group(1) or found.group(2)) if found else None


def _setting_of(repo: str, source: ModelSource) -> str:
    """The setting that names `repo`: the model's, an adapter's, or the tiny decoder's."""
    if repo.casefold() == source.model_id.casefold():
        return "MODEL_ID"
    if any(repo == adapter.repo for adapter in source.adapters):
        return "MODEL_ADAPTERS"
    return "VAE_DECODER_REPO"


def _disk_full(error: OSError) -> str:
    where = f" writing {error.filename}" if error.filename else ""
    return (
        f"A disk is full{where}: the pull needs room for the model on the share (MODEL_DIR) "
        "and for the files in flight in DOWNLOAD_CACHE_DIR; free some space and pull again."
    )
