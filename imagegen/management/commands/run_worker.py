"""manage.py run_worker: a generation worker of distributed mode (JOB_BROKER_URL)."""

import logging

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser

from imagegen.backend import worker_runtime
from imagegen.distributed.worker import WorkerRuntime, default_worker_name, set_runtime
from imagegen.scrape import WorkerState


def serve_metrics(runtime: WorkerRuntime, port: int) -> None:
    """The worker's own Prometheus families (its steps, decodes, jobs and Redis errors, its
    model and whether it is busy) on `port`, every address, from a thread of prometheus_client's
    own: a worker serves no HTTP otherwise. A port already taken stops the start, saying so."""
    from prometheus_client import REGISTRY, start_http_server

    REGISTRY.register(WorkerState(runtime.loader.status, lambda: runtime.job_id is not None))
    try:
        start_http_server(port)
    except OSError as exc:
        raise CommandError(f"WORKER_METRICS_PORT: cannot listen on port {port}: {exc}") from exc


class Command(BaseCommand):
    help = (
        "Run generations from the shared queue (JOB_BROKER_URL): Celery's worker with one "
        "process, one job at a time and no prefetch, and one pipeline, loaded from the share "
        "by the first job or a pull (WARM_START: at start). TORCH_THREADS=auto takes this "
        "process's CPU budget (its affinity and the container's quota)."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--name", default=None, help="default: <host>-<pid>-<4 hex digits>, new at every start"
        )
        parser.add_argument("--loglevel", default=settings.LOGGING["root"]["level"])

    def handle(self, *args, **options) -> None:
        if not settings.JOB_BROKER_URL:
            raise CommandError(
                "JOB_BROKER_URL is not set: without it the web process runs the jobs itself "
                "and no worker is needed"
            )
        from imagegen.distributed import tasks  # noqa: F401  (registers the task)
        from imagegen.distributed.celery_app import QUEUE, app, worker_queue

        name = options["name"] or default_worker_name()
        try:
            runtime = worker_runtime(name)
        except ValueError as exc:  # WORKER_MODELS names no offered model
            raise CommandError(str(exc)) from exc
        set_runtime(runtime)
        if settings.PRELOAD_MODEL_CODE:
            from imagegen.model.preload import import_loading_code

            import_loading_code()
        if settings.WORKER_METRICS_PORT:  # before the heartbeat: a port taken lists no worker
            serve_metrics(runtime, settings.WORKER_METRICS_PORT)
        runtime.start()
        if settings.WARM_START:
            runtime.loader.warm_start()
        logging.getLogger(__name__).info("worker %s: taking jobs from %s", name, QUEUE)
        try:
            app.worker_main(
                [
                    "worker",
                    "--pool=solo",
                    "--concurrency=1",
                    "--prefetch-multiplier=1",
                    "--disable-prefetch",
                    f"--queues={QUEUE},{worker_queue(name)}",
                    f"--hostname={name}@%h",
                    "--without-gossip",
                    "--without-mingle",
                    "--without-heartbeat",
                    f"--loglevel={options['loglevel']}",
                ]
            )
        finally:
            runtime.stop()
