"""GET /metrics: the whole process's Prometheus families (imagegen.metrics, todos.metrics,
django-prometheus' HTTP ones, and the state read at scrape time, imagegen.scrape) in
Prometheus' text format.
With API_TOKEN set it needs the token, like the other routes that cost nothing but tell a lot
(Prometheus sends it with its scrape config's `authorization`); with named keys, an admin key
or a key of --scope metrics, never an ordinary one (it tells about every key's use)."""

import threading

from django.http import HttpRequest, HttpResponse
from ninja import Router
from prometheus_client import REGISTRY
from prometheus_client.exposition import choose_encoder

from apikeys.auth import METRICS, token_required
from imagegen.api.schemas import errors
from imagegen.scrape import WebState

router = Router(tags=["operations"])


_registering = threading.Lock()
_registered: list[WebState] = []


def _web_state_registered() -> None:
    """At the first scrape, not at import: a worker imports the URLs too (Django's checks),
    and answers for itself (imagegen.scrape.WorkerState) on its own port. Under a lock: two
    first scrapes at once would register it twice (functools.cache does not lock)."""
    with _registering:
        if not _registered:
            state = WebState()
            REGISTRY.register(state)
            _registered.append(state)


@router.get(
    "/metrics",
    auth=token_required(METRICS),
    response={200: None, **errors()},
    summary="Prometheus metrics of this process (text format)",
    openapi_extra={
        "responses": {
            200: {
                "description": "Prometheus' text exposition format",
                "content": {"text/plain": {"schema": {"type": "string"}}},
            }
        }
    },
)
def metrics(request: HttpRequest):
    # The format the scraper asks for (OpenMetrics or the text format), as
    # prometheus_client's own exporter negotiates it.
    _web_state_registered()
    encode, content_type = choose_encoder(request.headers.get("Accept", ""))
    return HttpResponse(encode(REGISTRY), content_type=content_type)
