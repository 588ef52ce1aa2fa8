"""A job's webhook: URL and secret checked before queueing, and the process's senders."""

import threading
from collections.abc import Callable
from typing import NamedTuple

from django.conf import settings

from apikeys.selectors import Caller, key_webhook_secret
from core.errors import FieldError
from imagegen.backend import Backend
from imagegen.generation.job_board import JobView
from imagegen.webhooks.addresses import Allowance, UrlRefused, check_url
from imagegen.webhooks.delivery import Dispatcher, Policy
from imagegen.webhooks.outbox import Watch

SYNC_WEBHOOK = "only with async=true: a synchronous request has its answer"
NO_SECRET = (
    "no secret to sign webhooks with: set WEBHOOK_SECRET (or give the key its own: "
    "manage.py keys webhook-secret NAME)"
)


class WebhookPlan(NamedTuple):
    """The webhook a job will tell, checked before it is queued."""

    url: str
    origin: str
    signer: str  # "service" (WEBHOOK_SECRET) or "key:<name>" (the key's own secret)


def webhook_plan(
    *, url: str | None, caller: Caller | None, origin: str, asynchronous: bool
) -> WebhookPlan | None:
    """The request's `webhook_url`, else its key's `--webhook` (async only), else WEBHOOK_URL.

    A bad one is refused before queueing, with a 400 naming where it came from and the rule."""
    field = "webhook_url"
    if url and not asynchronous:
        raise FieldError(field, SYNC_WEBHOOK)
    if not url and asynchronous:
        if caller is not None and caller.webhook_url:
            url, field = caller.webhook_url, "the key's --webhook"
        elif settings.WEBHOOK_URL:
            url, field = settings.WEBHOOK_URL, "WEBHOOK_URL"
    if not url:
        return None
    signer = f"key:{caller.name}" if caller is not None and caller.signs_webhooks else "service"
    if signer == "service" and not settings.WEBHOOK_SECRET:
        raise FieldError(field, NO_SECRET)  # before the URL's name is looked up
    try:
        check_url(url, Allowance.parse(settings.WEBHOOK_ALLOW))
    except UrlRefused as refused:
        raise FieldError(field, refused.rule) from None
    return WebhookPlan(url, origin, signer)


def webhook_watch(backend: Backend, *, job_id: str, plan: WebhookPlan) -> None:
    """Tells the job's webhook when it ends."""
    backend.webhooks.watch(Watch(job_id, plan.url, plan.origin, plan.signer))


def webhook_secrets(signer: str) -> list[str]:
    """The key's own secrets, else WEBHOOK_SECRET's."""
    if signer.startswith("key:") and (own := key_webhook_secret(name=signer[4:])):
        return [own]
    return list(settings.WEBHOOK_SECRET)


def webhooks_start(backend: Backend, *, describe: Callable[[JobView, Watch], dict]) -> None:
    """Started once, on the backend; they also send what a stopped process left in the outbox."""
    policy = Policy(
        allow=Allowance.parse(settings.WEBHOOK_ALLOW),
        retry_seconds=settings.WEBHOOK_RETRY_SECONDS,
        senders=settings.WEBHOOK_SENDERS,
    )
    with _starting:
        if not _senders:
            _senders.append(Dispatcher(backend.webhooks, backend.jobs, policy,
                                       describe=describe, secrets_for=webhook_secrets))  # fmt: skip
        _senders[0].start()


_senders: list[Dispatcher] = []  # the process's one, once started
_starting = threading.Lock()
