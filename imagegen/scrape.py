"""The gauges of what is, read when Prometheus scrapes rather than kept up to date: the jobs
queued and running and the model's state and download, exactly as GET /jobs and
GET /model/status would answer at that moment (a kept gauge could drift from them on any path
that forgot to move it).

A web process answers for its job board: its own queue in process, the shared store's in
distributed mode, so a scrape of any one replica sees the whole deployment's queue (the same
figure from every replica: take max(), not sum(), across them). A worker answers for itself:
its own model and whether it is running a job (imagegen_worker_busy).
"""

import logging
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator

from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from imagegen.backend import Backend, current_backend
from imagegen.generation.job_board import JobState, JobView
from imagegen.model.status import ModelStatus, State

log = logging.getLogger(__name__)


def _model_families(status: ModelStatus) -> Iterator[GaugeMetricFamily]:
    state = GaugeMetricFamily(
        "imagegen_model_state",
        "The model's state: 1 for the state it is in, 0 for the others",
        labels=["state"],
    )
    for name in State:
        state.add_metric([name.value], 1.0 if status.state == name.value else 0.0)
    yield state
    yield GaugeMetricFamily(
        "imagegen_model_pull_done_bytes",
        "Bytes of the model's files on the share (or fetched so far by a pull under way)",
        value=status.download.bytes_done,
    )
    yield GaugeMetricFamily(
        "imagegen_model_pull_size_bytes",
        "Bytes of the model's files in all (0 until a pull or the share's manifest says)",
        value=status.download.bytes_total,
    )


class WebState(Collector):
    """A web process's job board and model, at each scrape. A store that does not answer
    (distributed mode, Redis away) leaves these families out of that scrape and the rest of
    it whole: the scrape is how an operator sees the outage (imagegen_redis_errors_total)."""

    def collect(self) -> Iterable[GaugeMetricFamily]:
        backend = current_backend()
        try:
            jobs = backend.jobs.unfinished()
            status = backend.models.status()
        except Exception as exc:  # a scrape must answer whatever fails
            log.warning("metrics: the job board or model did not answer: %s", exc)
            return []
        queued = sum(job.state is JobState.QUEUED for job in jobs)
        return [
            GaugeMetricFamily("imagegen_jobs_queued", "Jobs waiting for their turn", value=queued),
            GaugeMetricFamily(
                "imagegen_jobs_running", "Jobs running now", value=len(jobs) - queued
            ),
            *_model_families(status),
            *_models_families(backend, jobs),
            *_webhook_families(backend),
        ]


def _models_families(backend: Backend, jobs: list[JobView]) -> list[GaugeMetricFamily]:
    """Per offered model: the jobs waiting for it and, in process, whether it is resident.

    A web replica of distributed mode holds no model, so it reports no residency."""
    default = backend.loader.source.model_id
    offered = [model.id for model in backend.offered().models]
    queued = GaugeMetricFamily(
        "imagegen_model_jobs_queued", "Jobs waiting for their turn, by the model they name",
        labels=["model"],
    )  # fmt: skip
    waiting = Counter(
        job.parameters.model or default for job in jobs if job.state is JobState.QUEUED
    )
    for model in [*offered, *(m for m in waiting if m not in offered)]:
        queued.add_metric([model], waiting[model])
    if backend.distributed:
        return [queued]
    resident = GaugeMetricFamily(
        "imagegen_model_resident", "1 for each offered model in this process's memory now",
        labels=["model"],
    )  # fmt: skip
    if backend.shelf is not None:
        held = set(backend.shelf.resident())
    else:
        held = {default} if backend.loader.resident else set()
    for model in offered:
        resident.add_metric([model], 1.0 if model in held else 0.0)
    return [queued, resident]


def _webhook_families(backend: Backend) -> list[GaugeMetricFamily]:
    """The webhook deliveries waiting (the deployment's, in distributed mode) and how old the
    oldest is."""
    try:
        count, oldest = backend.webhooks.pending()
    except Exception as exc:
        log.warning("metrics: the webhook outbox did not answer: %s", exc)
        return []
    age = 0.0 if oldest is None else max(0.0, time.time() - oldest)
    return [
        GaugeMetricFamily(
            "imagegen_webhook_pending",
            "Webhook deliveries not yet delivered nor given up",
            value=count,
        ),
        GaugeMetricFamily(
            "imagegen_webhook_oldest_pending_seconds",
            "Age of the oldest webhook delivery waiting; 0: none",
            value=age,
        ),
    ]


class WorkerState(Collector):
    """A worker process's own model and whether it is running a job (distributed mode)."""

    def __init__(self, status: Callable[[], ModelStatus], busy: Callable[[], bool]) -> None:
        self.status = status
        self.busy = busy

    def collect(self) -> Iterable[GaugeMetricFamily]:
        busy = GaugeMetricFamily(
            "imagegen_worker_busy", "1 while this worker runs a job", value=int(self.busy())
        )
        return [busy, *_model_families(self.status())]
