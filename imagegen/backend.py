"""The process's backend, built once from the settings: the one place that reads
JOB_BROKER_URL and chooses a job mode.

- In process (the default): jobs run on a thread of this process (imagegen.generation.jobs),
  the model is this process's own (imagegen.model.loader), identical protocol requests meet in
  this process's memory (imagegen.generation.shared_runs).
- Distributed (JOB_BROKER_URL): jobs live in Redis and run on Celery workers
  (imagegen.distributed.board), the model is the deployment's, downloaded by a web process and
  loaded by every worker (imagegen.distributed.shared_model), and identical requests meet in
  Redis whichever replica each reaches (imagegen.distributed.runs).

Services, selectors, the apps' start-up and the management commands import this module;
nothing below them does, so the layers stay a tree (api -> services/selectors -> backend ->
distributed -> generation -> model) and a lower module never asks which mode it runs in. The
distributed modules are imported only in that mode.
"""

from functools import cache
from typing import TYPE_CHECKING

from django.conf import settings

from imagegen.errors import JobNotFound, JobNotInStore
from imagegen.generation.images import ImageStore
from imagegen.generation.job_board import JobBoard
from imagegen.generation.jobs import JobQueue
from imagegen.generation.presets import GenerationRules, generation_rules, preset_for
from imagegen.generation.previews import PreviewPolicy
from imagegen.generation.rates import LocalRates, RateCounter
from imagegen.generation.shared_runs import LocalRuns, RunRegistry
from imagegen.model import hub
from imagegen.model.cpu import torch_threads
from imagegen.model.device import compute_device
from imagegen.model.loader import ModelLoader
from imagegen.model.pipeline import LoadOptions
from imagegen.model.status import ModelHandle
from imagegen.webhooks.outbox import DiskOutbox, Outbox

if TYPE_CHECKING:
    from imagegen.distributed.worker import WorkerRuntime


def is_distributed() -> bool:
    return bool(settings.JOB_BROKER_URL)


def model_source() -> hub.ModelSource:
    """The configured model (MODEL_ID, its adapters, decoder and inpainting checkpoint) and
    where it lives."""
    return hub.ModelSource(
        model_id=settings.MODEL_ID,
        revision=settings.MODEL_REVISION,
        variant=settings.MODEL_VARIANT or None,
        model_dir=settings.MODEL_DIR,
        cache_dir=settings.DOWNLOAD_CACHE_DIR,
        endpoint=settings.HF_ENDPOINT,
        token=settings.HF_TOKEN,
        workers=settings.DOWNLOAD_WORKERS,
        adapters=settings.MODEL_ADAPTERS,
        decoder=settings.VAE_DECODER,
        inpaint=settings.INPAINT_MODEL,
    )


@cache
def loader() -> ModelLoader:
    """This process's own model: the one an in-process web process or a worker loads. A web
    process of distributed mode keeps one too, for its source and status fields only."""
    return ModelLoader(
        model_source(),
        compute_device(),
        LoadOptions(
            threads=torch_threads(settings.TORCH_THREADS),
            attention_slicing=settings.ATTENTION_SLICING,
            vae_tile=settings.VAE_TILE_SIZE,
        ),
    )


@cache
def image_store() -> ImageStore:
    """The stored images (OUTPUT_DIR): on the share in distributed mode, so every replica and
    worker reads and writes the same ones."""
    return ImageStore(settings.OUTPUT_DIR)


def rules_from_settings() -> GenerationRules:
    """The generation rules of this process's settings: the configured model's preset
    (MODEL_ID, MODEL_ADAPTERS; none with GEN_FOLLOW_MODEL off) under the GEN_* settings."""
    preset = None
    if settings.GEN_FOLLOW_MODEL:
        preset = preset_for(model_id=settings.MODEL_ID, adapters=settings.MODEL_ADAPTERS)
    return generation_rules(
        preset=preset,
        default_steps=settings.GEN_DEFAULT_STEPS,
        default_guidance=settings.GEN_DEFAULT_GUIDANCE,
        default_scheduler=settings.GEN_DEFAULT_SCHEDULER,
        steps_cap=settings.GEN_STEPS_CAP,
        guidance_cap=settings.GEN_GUIDANCE_CAP,
        max_steps=settings.GEN_MAX_STEPS,
        max_guidance=settings.GEN_MAX_GUIDANCE,
    )


@cache
def models() -> ModelHandle:
    """What POST /model/pull and GET /model/status act on: this process's loader, or with
    JOB_BROKER_URL the shared model (downloaded once by a web process, loaded by every
    worker process)."""
    if is_distributed():
        from imagegen.distributed.connection import redis_client
        from imagegen.distributed.shared_model import SharedModel

        return SharedModel(loader(), redis_client())
    return loader()


@cache
def jobs() -> JobBoard:
    """The process's job board; first made in ImagegenConfig.ready(), before any request
    thread."""
    if is_distributed():
        from imagegen.distributed.board import RedisJobBoard
        from imagegen.distributed.changes import ChangeFeed
        from imagegen.distributed.connection import job_store, listener_client, redis_client
        from imagegen.distributed.timings import RedisTimings, measured_model

        return RedisJobBoard(
            job_store(),
            models=models(),
            queue_max=settings.GEN_QUEUE_MAX,
            keep=settings.JOBS_KEEP,
            rules=rules_from_settings(),
            timings=RedisTimings(redis_client(), measured_model(model_source())),
            changes=ChangeFeed(listener_client()),
        )
    return JobQueue(
        loader(),
        image_store(),
        queue_max=settings.GEN_QUEUE_MAX,
        load_timeout=settings.GEN_LOAD_TIMEOUT,
        keep=settings.JOBS_KEEP,
        rules=rules_from_settings(),
        nice=settings.GEN_NICE,
        previews=preview_policy(),
        throughput=settings.GEN_THROUGHPUT,
    )


# How long a webhook's record outlives its last possible try (in process; Redis expires them).
RECORDS_OUTLIVE_RETRIES = 86400


@cache
def webhook_outbox() -> Outbox:
    """Where webhook deliveries wait: beside the image records in process (OUTPUT_DIR), in
    the jobs' Redis in distributed mode, so every web replica sends them."""
    if is_distributed():
        from imagegen.distributed.connection import redis_client
        from imagegen.distributed.webhook_outbox import RedisOutbox

        return RedisOutbox(redis_client())
    outbox = DiskOutbox(settings.OUTPUT_DIR / "webhooks")
    # The records of jobs this process's predecessors ran: their jobs are long gone.
    outbox.forget_records(older_than=settings.WEBHOOK_RETRY_SECONDS + RECORDS_OUTLIVE_RETRIES)
    return outbox


def job_not_found() -> JobNotFound:
    """The 404 for an unknown job, saying what keeps jobs in this mode: this process, or the
    store (Redis), which a restart without persistence empties."""
    if is_distributed():
        return JobNotInStore(settings.JOBS_KEEP)
    return JobNotFound()


@cache
def runs() -> RunRegistry:
    """Where synchronous protocol requests' runs are registered: this process, or Redis for
    every web replica in distributed mode."""
    if is_distributed():
        from imagegen.distributed.connection import redis_client
        from imagegen.distributed.runs import RedisRuns

        return RedisRuns(redis_client(), ttl_seconds=settings.GEN_SYNC_TIMEOUT + 60)
    return LocalRuns(ttl_seconds=settings.GEN_SYNC_TIMEOUT + 60)


@cache
def rates() -> RateCounter:
    """The API keys' per-minute image counts: this process's, or Redis's for every web
    replica in distributed mode."""
    if is_distributed():
        from imagegen.distributed.connection import redis_client
        from imagegen.distributed.rates import RedisRates

        return RedisRates(redis_client())
    return LocalRates()


def worker_runtime(name: str) -> "WorkerRuntime":
    """A Celery worker process's runtime (manage.py run_worker): its own loader, the shared
    job store and the shared images."""
    from imagegen.distributed.connection import job_store, redis_client
    from imagegen.distributed.timings import RedisTimings, measured_model
    from imagegen.distributed.worker import WorkerRuntime

    return WorkerRuntime(
        job_store(),
        loader(),
        image_store(),
        name=name,
        load_timeout=settings.GEN_LOAD_TIMEOUT,
        timings=RedisTimings(redis_client(), measured_model(model_source())),
        previews=preview_policy(),
        throughput=settings.GEN_THROUGHPUT,
    )


def preview_policy() -> PreviewPolicy:
    """PREVIEW, PREVIEW_EVERY and PREVIEW_SECONDS, for whoever runs the jobs."""
    return PreviewPolicy(
        method=settings.PREVIEW, every=settings.PREVIEW_EVERY, seconds=settings.PREVIEW_SECONDS
    )
