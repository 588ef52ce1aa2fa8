"""A ready app of this process for a test module (or package) that shares one across its
tests: the tiny SD model on a share of its own, a backend built as a web process of the
in-process mode builds it from these settings, installed, and the app served on a loopback
port. It answers `url` and `base_url` as an AppServer does, so
the real clients (the openai SDK, webuiapi, the MCP client, requests) talk HTTP to it, and no
gunicorn is started."""

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from django.conf import settings
from django.test import override_settings

from imagegen.backend import Backend, installed, preview_policy, rules_from_settings
from imagegen.generation.images import ImageStore
from imagegen.generation.jobs import JobQueue
from imagegen.generation.rates import LocalRates
from imagegen.generation.shared_runs import LocalRuns
from imagegen.webhooks.outbox import DiskOutbox
from tests.support.in_process import LoopbackApp, loopback
from tests.support.loaders import new_loader, wait_for
from tests.support.local_hub import LocalHub
from tests.support.model_service import SD_REPO


def built_backend(loader: Any, images: Path) -> Backend:
    """The backend imagegen.backend.build_backend builds in process from the settings in
    force (GEN_QUEUE_MAX, JOBS_KEEP, GEN_SYNC_TIMEOUT, GEN_NICE, PREVIEW...), on `loader`."""
    store = ImageStore(images)
    jobs = JobQueue(
        loader, store, queue_max=settings.GEN_QUEUE_MAX, load_timeout=settings.GEN_LOAD_TIMEOUT,
        keep=settings.JOBS_KEEP, rules=rules_from_settings(), nice=settings.GEN_NICE,
        previews=preview_policy(), throughput=settings.GEN_THROUGHPUT,
    )  # fmt: skip
    return Backend(
        jobs=jobs, models=loader, loader=loader, images=store,
        runs=LocalRuns(ttl_seconds=settings.GEN_SYNC_TIMEOUT + 60), rates=LocalRates(),
        webhooks=DiskOutbox(images / "webhooks"), jobs_keep=settings.JOBS_KEEP,
    )  # fmt: skip


@contextmanager
def in_process_app(
    hub_root: Path, work: Path, *, pulled: bool = True, **overrides: Any
) -> Iterator[LoopbackApp]:
    """The app of `overrides` (Django settings, parsed values: True, 500, a Path...) on the
    tiny SD model of a hub of `hub_root`, pulled and loaded unless `pulled` is False (then the
    hub stays up for the app's own pull). Settings and backend are this process's until the
    block ends, so one such app runs at a time."""
    share, images = work / "share", work / "images"
    share.mkdir()
    defaults = {"MODEL_ID": SD_REPO, "MODEL_REVISION": "main", "MODEL_VARIANT": "fp16",
                "MODEL_ADAPTERS": (), "MODEL_DIR": share, "OUTPUT_DIR": images,
                "GEN_DEFAULT_STEPS": 2}  # fmt: skip
    with (
        LocalHub(hub_root) as hub,
        override_settings(**{"HF_ENDPOINT": hub.url, **defaults, **overrides}),
    ):
        loader = new_loader(hub, share, work / "cache")
        if pulled:
            assert loader.pull()
            assert wait_for(loader, {"ready", "failed"}) == "ready", loader.status()
        built = built_backend(loader, images)
        try:
            with installed(built), loopback() as base_url:
                yield LoopbackApp(
                    base_url, built, env={"OUTPUT_DIR": str(images), "MODEL_DIR": str(share)}
                )
        finally:  # nothing of the module's goes on running under the next one's tests
            for job in built.jobs.unfinished():
                built.jobs.cancel(job.id)
