"""The process's backend, built once from the settings.

This is the one place that reads JOB_BROKER_URL and chooses a job mode.

- In process (the default): jobs run on a thread here (imagegen.generation.jobs). The model is
  this process's own (imagegen.model.loader). Identical requests meet in memory
  (imagegen.generation.shared_runs).
- Distributed (JOB_BROKER_URL): jobs live in Redis and run on Celery workers
  (imagegen.distributed.board). A web process downloads the model; every worker loads it
  (imagegen.distributed.shared_model). Identical requests meet in Redis, whichever replica
  each reaches (imagegen.distributed.runs).

Routes hand the Backend (current_backend) to the services and selectors they call. Routes,
the apps' start-up and the management commands import this module; nothing below them does.
So the layers stay a tree: api -> services/selectors -> backend -> distributed -> generation
-> model. No lower module asks which mode it runs in. The distributed modules load only in
that mode."""

import contextlib
import dataclasses
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from django.conf import settings

from imagegen.errors import JobNotFound, JobNotInStore
from imagegen.generation.catalog import Catalog, OfferedModel, parse_models
from imagegen.generation.checkpoints import CheckpointChoices, LocalCheckpoints
from imagegen.generation.images import ImageStore
from imagegen.generation.job_board import JobBoard
from imagegen.generation.jobs import JobQueue
from imagegen.generation.presets import GenerationRules, generation_rules, preset_for
from imagegen.generation.previews import PreviewPolicy
from imagegen.generation.rates import LocalRates, RateCounter
from imagegen.generation.shared_runs import LocalRuns, RunRegistry
from imagegen.generation.upscale import Upscaling
from imagegen.model import hub
from imagegen.model.cpu import torch_threads
from imagegen.model.decoder import FULL_DECODER
from imagegen.model.device import compute_device
from imagegen.model.loader import ModelLoader
from imagegen.model.loras import LoraCatalog, parse_loras
from imagegen.model.memory import memory_limit
from imagegen.model.pipeline import LoadOptions
from imagegen.model.shelf import ModelShelf
from imagegen.model.status import ModelHandle
from imagegen.model.upscalers.offered import OfferedUpscalers, parse_upscalers
from imagegen.webhooks.outbox import DiskOutbox, Outbox

if TYPE_CHECKING:
    from imagegen.distributed.worker import WorkerRuntime


def is_distributed() -> bool:
    return bool(settings.JOB_BROKER_URL)


def model_source() -> hub.ModelSource:
    """The configured model and its extras, and where it lives."""
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
        loras=parse_loras(settings.LORAS),
    )


def entry_source(model_id: str, revision: str) -> hub.ModelSource:
    """A MODELS entry's source: MODEL_ID's share, cache, hub and variant, but none of its extras."""
    return dataclasses.replace(
        model_source(), model_id=model_id, revision=revision, adapters=(),
        decoder=FULL_DECODER, inpaint=None, loras=(),
    )  # fmt: skip


def offered_sources() -> list[hub.ModelSource]:
    """MODEL_ID's source, then each MODELS entry's (imagegen.checks refused bad ones at start)."""
    entries = parse_models(settings.MODELS)
    return [model_source(), *(entry_source(e.repo, e.revision) for e in entries)]


def offered_upscalers() -> OfferedUpscalers:
    """UPSCALERS' files on the share, with Lanczos and Nearest beside them."""
    return OfferedUpscalers(
        parse_upscalers(settings.UPSCALERS),
        model_dir=settings.MODEL_DIR,
        cache_dir=settings.DOWNLOAD_CACHE_DIR,
        endpoint=settings.HF_ENDPOINT,
        token=settings.HF_TOKEN,
    )


def new_loader(source: hub.ModelSource | None = None) -> ModelLoader:
    """A process's own model: MODEL_ID's unless `source` says another.

    In-process web processes and workers load it. A distributed web process keeps one only for
    its source and status fields."""
    return ModelLoader(
        source or model_source(),
        compute_device(),
        LoadOptions(
            threads=torch_threads(settings.TORCH_THREADS),
            attention_slicing=settings.ATTENTION_SLICING,
            vae_tile=settings.VAE_TILE_SIZE,
            prompt_cache=settings.PROMPT_CACHE,
        ),
    )


def rules_from_settings() -> GenerationRules:
    """The configured model's preset under the GEN_* settings.

    GEN_FOLLOW_MODEL off means no preset."""
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


def entry_rules(model_id: str) -> GenerationRules:
    """A MODELS entry's recognised preset within the form's bounds.

    MODEL_ID's GEN_DEFAULT_* and caps stay MODEL_ID's alone."""
    preset = preset_for(model_id=model_id, adapters=()) if settings.GEN_FOLLOW_MODEL else None
    return generation_rules(
        preset=preset, default_steps=None, default_guidance=None, default_scheduler=None,
        steps_cap=None, guidance_cap=None, max_steps=settings.GEN_MAX_STEPS,
        max_guidance=settings.GEN_MAX_GUIDANCE,
    )  # fmt: skip


def catalog_of(sources: list[hub.ModelSource], default_rules: GenerationRules) -> Catalog:
    """The offered models: the first source is MODEL_ID's, under `default_rules`."""
    first, *others = sources
    return Catalog(
        (
            OfferedModel(first, default_rules, default=True),
            *(OfferedModel(s, entry_rules(s.model_id)) for s in others),
        )
    )


# How long a webhook's record outlives its last possible try (in process; Redis expires them).
RECORDS_OUTLIVE_RETRIES = 86400


@dataclass(eq=False)  # one backend is one process's: compared and hashed by identity
class Backend:
    """What services and selectors act on, handed to them by the routes.

    A test builds its own and installs it (installed): no global is patched."""

    jobs: JobBoard  # the job board: this process's queue, or Redis's with workers
    models: ModelHandle  # what POST /model/pull and GET /model/status act on
    loader: ModelLoader  # this process's own model (its source and status in distributed)
    runs: RunRegistry  # where identical synchronous requests meet
    rates: RateCounter  # the API keys' per-minute image counts
    images: ImageStore  # the stored images (OUTPUT_DIR)
    webhooks: Outbox  # where webhook deliveries wait
    distributed: bool = False  # JOB_BROKER_URL chose Redis and Celery workers
    jobs_keep: int = 1000  # JOBS_KEEP, which the 404 of a forgotten job names in Redis
    # Distributed mode: each MODELS entry's pull and status through the workers, by repo id.
    entries: dict[str, ModelHandle] = dataclasses.field(default_factory=dict)
    catalog: Catalog | None = None  # the offered models (None: MODEL_ID's alone)
    shelf: ModelShelf | None = None  # their loaders (None: `loader` alone)
    # The model each A1111 caller chose (POST /sdapi/v1/options), kept where jobs are kept.
    checkpoints: CheckpointChoices = field(default_factory=LocalCheckpoints)
    upscalers: OfferedUpscalers = field(default_factory=lambda: offered_upscalers())
    loras: LoraCatalog | None = None  # LORAS and the dropped LoRA files (None: none offered)

    def offered(self) -> Catalog:
        """The offered models, MODEL_ID's first."""
        if self.catalog is not None:
            return self.catalog
        return Catalog((OfferedModel(self.loader.source, self.rules, default=True),))

    def loader_of(self, model: OfferedModel) -> ModelLoader:
        """This process's loader of an offered model."""
        if model.default or self.shelf is None:
            return self.loader
        return self.shelf.loader(model.id)

    def handle_of(self, model: OfferedModel) -> ModelHandle:
        """What a pull and the status of an offered model act on: the workers' in distributed
        mode, this process's loader otherwise."""
        if model.default:
            return self.models
        return self.entries.get(model.id) or self.loader_of(model)

    @property
    def rules(self) -> GenerationRules:
        """The defaults and caps a request meets: the board's own, which it applies."""
        return self.jobs.rules

    def job_not_found(self) -> JobNotFound:
        """The 404 for an unknown job, naming what keeps jobs in this mode.

        That is this process, or Redis, which a restart without persistence empties."""
        if self.distributed:
            return JobNotInStore(self.jobs_keep)
        return JobNotFound()


def build_backend() -> Backend:
    """The backend of this process's settings: in process, or on Redis with JOB_BROKER_URL."""
    sources = offered_sources()
    loader, *others = [new_loader(source) for source in sources]
    shelf = ModelShelf([loader, *others], shelf_limit())
    images = ImageStore(settings.OUTPUT_DIR)
    upscalers = offered_upscalers()
    loader.extra_files = (upscalers,)  # MODEL_ID turns ready once UPSCALERS' files are there
    rules = rules_from_settings()
    catalog = catalog_of(sources, rules)
    loras = LoraCatalog(
        settings.MODEL_DIR, sources[0].loras, models={s.model_id: s.path for s in sources}
    )
    run_ttl = settings.GEN_SYNC_TIMEOUT + 60
    if is_distributed():
        from imagegen.distributed.board import RedisJobBoard
        from imagegen.distributed.changes import ChangeFeed
        from imagegen.distributed.checkpoints import RedisCheckpoints
        from imagegen.distributed.connection import job_store, listener_client, redis_client
        from imagegen.distributed.rates import RedisRates
        from imagegen.distributed.runs import RedisRuns
        from imagegen.distributed.shared_model import SharedModel
        from imagegen.distributed.timings import RedisTimings, measured_model
        from imagegen.distributed.webhook_outbox import RedisOutbox

        client = redis_client()  # one pool for the process's every store call
        models: ModelHandle = SharedModel(loader, client)
        entries: dict[str, ModelHandle] = {
            m.id: SharedModel(shelf.loader(m.id), client, default=False)
            for m in catalog.models if not m.default
        }  # fmt: skip
        jobs: JobBoard = RedisJobBoard(
            job_store(client),
            models=models,
            queue_max=settings.GEN_QUEUE_MAX,
            keep=settings.JOBS_KEEP,
            rules=rules,
            timings=RedisTimings(client, measured_model(model_source())),
            changes=ChangeFeed(listener_client()),
            entries={m.id: (entries[m.id], m.rules) for m in catalog.models if not m.default},
        )
        return Backend(
            entries=entries,
            jobs=jobs, models=models, loader=loader, images=images,
            runs=RedisRuns(client, ttl_seconds=run_ttl),
            rates=RedisRates(client),
            webhooks=RedisOutbox(client),
            checkpoints=RedisCheckpoints(client),
            distributed=True, jobs_keep=settings.JOBS_KEEP, catalog=catalog, shelf=shelf,
            loras=loras, upscalers=upscalers,
        )  # fmt: skip
    outbox = DiskOutbox(settings.OUTPUT_DIR / "webhooks")
    # Records of jobs this process's predecessors ran: those jobs are long gone.
    outbox.forget_records(older_than=settings.WEBHOOK_RETRY_SECONDS + RECORDS_OUTLIVE_RETRIES)
    jobs = JobQueue(
        loader,
        images,
        queue_max=settings.GEN_QUEUE_MAX,
        load_timeout=settings.GEN_LOAD_TIMEOUT,
        keep=settings.JOBS_KEEP,
        rules=rules,
        nice=settings.GEN_NICE,
        previews=preview_policy(),
        throughput=settings.GEN_THROUGHPUT,
        models={m.id: (shelf.loader(m.id), m.rules) for m in catalog.models if not m.default},
        shelf=shelf,
        upscaling=upscaling_of(upscalers, shelf),
    )
    return Backend(
        jobs=jobs, models=loader, loader=loader, images=images,
        runs=LocalRuns(ttl_seconds=run_ttl), rates=LocalRates(), webhooks=outbox,
        jobs_keep=settings.JOBS_KEEP, catalog=catalog, shelf=shelf, loras=loras,
        upscalers=upscalers,
    )  # fmt: skip


_installed: Backend | None = None
_building = threading.Lock()


def install(backend: Backend | None) -> None:
    """Makes `backend` the process's (None: the next current_backend() builds one)."""
    global _installed
    _installed = backend


def current_backend() -> Backend:
    """The process's backend: the routes' one accessor.

    ImagegenConfig.ready builds it for a web process; a management command, on first use."""
    global _installed
    if _installed is None:
        with _building:
            if _installed is None:
                _installed = build_backend()
    return _installed


@contextlib.contextmanager
def installed(backend: Backend) -> Iterator[Backend]:
    """`backend` is the process's for the block (a test's), the one before it after."""
    before = _installed
    install(backend)
    try:
        yield backend
    finally:
        install(before)


def shelf_limit() -> int | None:
    """MODEL_MEMORY_LIMIT, else the container's or the machine's memory."""
    return settings.MODEL_MEMORY_LIMIT or memory_limit()


def worker_runtime(name: str) -> "WorkerRuntime":
    """A Celery worker's runtime (manage.py run_worker): its own shelf of the models it may run
    (WORKER_MODELS; ValueError names a bad entry), shared job store and images."""
    from imagegen.distributed.connection import job_store, redis_client
    from imagegen.distributed.pins import worker_models
    from imagegen.distributed.timings import RedisTimings, measured_model
    from imagegen.distributed.worker import WorkerRuntime

    sources = offered_sources()
    may_run = worker_models(catalog_of(sources, rules_from_settings()), settings.WORKER_MODELS)
    loader, *others = [new_loader(source) for source in sources]
    kept = [each for each in (loader, *others) if each.source.model_id in may_run]
    client = redis_client()
    shelf = ModelShelf(kept, shelf_limit())
    return WorkerRuntime(
        job_store(client),
        loader,
        ImageStore(settings.OUTPUT_DIR),
        shelf=shelf,
        may_run=may_run,
        name=name,
        load_timeout=settings.GEN_LOAD_TIMEOUT,
        timings=RedisTimings(client, measured_model(model_source())),
        previews=preview_policy(),
        throughput=settings.GEN_THROUGHPUT,
        upscaling=upscaling_of(offered_upscalers(), shelf),
    )


def upscaling_of(upscalers: OfferedUpscalers, shelf: ModelShelf) -> Upscaling:
    """The offered upscalers with their tiles' budget (UPSCALE_TILE_MEMORY, else sized by the
    shelf's resident models), for whoever runs the jobs."""
    return Upscaling(upscalers, settings.UPSCALE_TILE_MEMORY, shelf.resident_bytes)


def preview_policy() -> PreviewPolicy:
    """PREVIEW, PREVIEW_EVERY and PREVIEW_SECONDS, for whoever runs the jobs."""
    return PreviewPolicy(
        method=settings.PREVIEW, every=settings.PREVIEW_EVERY, seconds=settings.PREVIEW_SECONDS
    )
