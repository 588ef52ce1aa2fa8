"""The image service's Prometheus metric families, in one place, so the names an operator's
dashboards and alerts use are listed once (docs/metrics.md lists the same).

They live in prometheus_client's default registry, which django-prometheus' HTTP families
(`django_http_*`) use too, so GET /metrics and a worker's metrics port answer them all. One
gunicorn worker process serves the web role (config/gunicorn.py: the model's state is per
process), so no multiprocess mode is needed: each process's registry is its own and
Prometheus adds up replicas and workers by their `instance` label.

The gauges that describe state (the queue, the model) are not kept here: they are read when
a scrape asks (imagegen.api.metrics, the worker command's collector), so they cannot drift
from what GET /jobs and GET /model/status say. This module imports only core
(the kernel), so every layer of imagegen may count into it.
"""

import math

from core.metrics import Counter, Gauge, Histogram

# Seconds: a tiny model's step is milliseconds, SDXL's on a CPU tens of seconds.
_STEP_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 20, 40, 80)
# Seconds: a job waits and runs from milliseconds (tiny) to many minutes (SDXL, a deep queue).
_JOB_BUCKETS = (0.1, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 240, 480, 900, 1800, 3600)

JOBS_SUBMITTED = Counter(
    "imagegen_jobs_submitted",
    "Jobs queued, by the surface that queued them (native, openai, a1111)",
    ["surface"],
)
JOBS_FINISHED = Counter(
    "imagegen_jobs_finished",
    "Jobs ended, by outcome (succeeded, failed, cancelled), counted where they ended: the "
    "process that ran them, or the web process that cancelled them while queued",
    ["outcome"],
)
QUEUE_SECONDS = Histogram(
    "imagegen_job_queue_seconds", "Time a job waited before it started", buckets=_JOB_BUCKETS
)
RUN_SECONDS = Histogram(
    "imagegen_job_run_seconds",
    "Time a job ran, model wait, steps, decode and PNG included",
    buckets=_JOB_BUCKETS,
)
STEP_SECONDS = Histogram(
    "imagegen_step_seconds",
    "Seconds per denoising step (one UNet pass, both guidance halves), by image size",
    ["size"],
    buckets=_STEP_BUCKETS,
)
DECODE_SECONDS = Histogram(
    "imagegen_decode_seconds",
    "Seconds to decode the latents into pixels, by image size",
    ["size"],
    buckets=_STEP_BUCKETS,
)
EVENT_STREAMS_OPEN = Gauge(
    "imagegen_event_streams_open", "Job event streams (GET /jobs/<id>/events) open now"
)
WEBHOOK_EVENTS = Counter(
    "imagegen_webhook_events",
    "Webhook events made (a watched job ended), by type (job.succeeded, ...)",
    ["event"],
)
WEBHOOK_DELIVERIES = Counter(
    "imagegen_webhook_deliveries",
    "Webhook deliveries settled by this process, by outcome (delivered, given_up)",
    ["outcome"],
)
WEBHOOK_RETRIES = Counter(
    "imagegen_webhook_retries", "Webhook tries that got no 2xx and were scheduled again"
)
MODEL_LOADS = Counter(
    "imagegen_model_loads",
    "Offered models read into this process's memory, by model (the repo id)",
    ["model"],
)
MODEL_LOAD_SECONDS = Counter(
    "imagegen_model_load_seconds",
    "Seconds spent reading models into memory, by model: the load alone, no freeing",
    ["model"],
)
MODEL_SWAPS = Counter(
    "imagegen_model_swaps",
    "Loads that freed another model first to make room, by the model loaded",
    ["model"],
)
MODEL_SWAP_SECONDS = Counter(
    "imagegen_model_swap_seconds",
    "Seconds of those swaps, by the model loaded: freeing the others, then the load",
    ["model"],
)
REDIS_ERRORS = Counter(
    "imagegen_redis_errors",
    "Calls to the job store (Redis, distributed mode) that failed, retries spent, by error",
    ["error"],
)


# The `size` label's values: the squares a size is counted with (the nearest by pixels).
SIZE_CLASSES = (64, 128, 256, 512, 768, 1024, 1536, 2048)


def image_size(width: int, height: int) -> str:
    """The `size` label: the square of SIZE_CLASSES nearest in pixels (on a log scale), so
    the families keep a fixed handful of series whatever sizes clients send (any multiple
    of 8 per side is allowed: tens of thousands of sizes), and a common square is itself."""
    pixels = width * height
    side = min(SIZE_CLASSES, key=lambda s: abs(math.log(pixels / (s * s))))
    return f"{side}x{side}"
