"""Django settings: every value comes from the environment, with defaults safe in production."""

import ipaddress
import os
import secrets
from pathlib import Path
from typing import Any

from django.core.exceptions import ImproperlyConfigured

from config.threads import gunicorn_threads
from core.env import env_bool, env_float, env_int, env_list, env_str
from imagegen.model.adapters import DEFAULT_MODEL_ID, default_adapters, parse_adapters
from imagegen.model.decoder import default_decoder, parse_decoder
from imagegen.model.inpaint import parse_inpaint

BASE_DIR = Path(__file__).resolve().parent.parent
DATA_DIR = Path(env_str("DATA_DIR", str(BASE_DIR / ".data")))

DEBUG = env_bool("DEBUG", False)
SECRET_KEY = env_str("SECRET_KEY", "")
if not SECRET_KEY:
    if not DEBUG:
        raise ImproperlyConfigured("SECRET_KEY must be set when DEBUG is off")
    SECRET_KEY = secrets.token_urlsafe(50)

ALLOWED_HOSTS = env_list("ALLOWED_HOSTS", ["localhost", "127.0.0.1", "[::1]"])

INSTALLED_APPS = [
    "django.contrib.staticfiles",
    "ninja",
    "todos",
    "apikeys",
    "imagegen",
    "imagegen.ui",
]

MIDDLEWARE = [
    # django-prometheus' pair brackets the rest, so the HTTP families time all of it.
    "django_prometheus.middleware.PrometheusBeforeMiddleware",
    "core.middleware.RequestIdMiddleware",
    "core.middleware.AppVersionHeaderMiddleware",
    # X-Frame-Options: DENY (Django's default value) on every answer, the shaped errors'
    # too: no page frames ours.
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "core.middleware.ErrorShapeMiddleware",
    "core.middleware.HeadAsGetMiddleware",
    "config.cross_site.CrossSiteMiddleware",
    "django.middleware.security.SecurityMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.middleware.common.CommonMiddleware",
    "core.metrics.RouteMetricsMiddleware",
]

# Ninja serves /todo and /todo/ as different routes; redirecting would turn a
# DELETE /todo/ into a GET.
APPEND_SLASH = False

ROOT_URLCONF = "config.urls"
WSGI_APPLICATION = "config.wsgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "APP_DIRS": True,
        "OPTIONS": {"context_processors": []},
    }
]

# A full todo batch (1000 items of 40 + 1000 characters) JSON-escaped is about 13 MB.
DATA_UPLOAD_MAX_MEMORY_SIZE = env_int("MAX_BODY_BYTES", 16 * 1024 * 1024, minimum=1024)
# File parts count too (core.uploads): Django's limit above leaves them out.
FILE_UPLOAD_HANDLERS = [
    "core.uploads.BodyLimit",
    "django.core.files.uploadhandler.MemoryFileUploadHandler",
    "django.core.files.uploadhandler.TemporaryFileUploadHandler",
]

# Todos live in MongoDB (see todos/); nothing here needs Django's SQL database.
DATABASES: dict = {}

# The API docs' assets are served by WhiteNoise straight from the installed packages.
STATIC_URL = "static/"
WHITENOISE_USE_FINDERS = True
WHITENOISE_AUTOREFRESH = DEBUG
USE_TZ = True
TIME_ZONE = "UTC"

# Bearer token required by requests that change state or cost compute; unset = open.
API_TOKEN = env_str("API_TOKEN", "")
# Named keys kept in MongoDB (manage.py keys; docs/keys.md), taken besides API_TOKEN. Off, the
# service never reads them, so the image routes never need the database.
API_KEYS = env_bool("API_KEYS", False)
# The limits of a named key created without its own (unset: none); API_TOKEN has none.
KEY_DEFAULT_MAX_QUEUED = env_int("KEY_DEFAULT_MAX_QUEUED", None, minimum=1)
KEY_DEFAULT_PER_MINUTE = env_int("KEY_DEFAULT_PER_MINUTE", None, minimum=1)

# Behind a proxy that ends TLS and that every request comes through (Azure's ingress): its
# X-Forwarded-Proto says a request is https, so HSTS is sent. Off: only a direct TLS
# connection is (gunicorn here speaks plain HTTP).
if env_bool("SECURE_PROXY_SSL_HEADER", False):
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
# Strict-Transport-Security's max-age on https answers; 0: none.
SECURE_HSTS_SECONDS = env_int("SECURE_HSTS_SECONDS", 0, minimum=0)

# Addresses or networks (CIDR) of the reverse proxies in front of the service (Azure's
# ingress). Only a request arriving from one of them has its X-Forwarded-For,
# X-Forwarded-Proto and X-Forwarded-Host believed; empty: nobody's.
TRUSTED_PROXIES: list[ipaddress.IPv4Network | ipaddress.IPv6Network] = []
for _proxy in env_list("TRUSTED_PROXIES", []):
    try:
        TRUSTED_PROXIES.append(ipaddress.ip_network(_proxy, strict=False))
    except ValueError:
        raise ImproperlyConfigured(
            f"TRUSTED_PROXIES: {_proxy!r} is not an IP address or network (CIDR)"
        ) from None

# --- todos -----------------------------------------------------------------------------
MONGODB_URI = env_str("MONGODB_URI", "mongodb://127.0.0.1:27017/todos")
# How long a request waits for an unreachable database before answering 503; all of a todo
# request's database work must end within five times this (todos.middleware).
MONGODB_TIMEOUT_MS = env_int("MONGODB_TIMEOUT_MS", 2000, minimum=100)
# The worker's request threads: gunicorn's real count in a gunicorn worker (config/threads.py),
# else GUNICORN_THREADS. The bounds below are kept under it.
_THREADS = gunicorn_threads() or env_int("GUNICORN_THREADS", 16, minimum=1)
if _THREADS < 2:
    raise ImproperlyConfigured(
        f"the worker runs {_THREADS} thread (gunicorn's --threads, or GUNICORN_THREADS outside "
        "gunicorn): the service needs at least 2, one kept for /health while a request waits; "
        "start gunicorn with --threads 8 (as config/gunicorn.py does)"
    )
# Todo requests that may wait on the database at once; the rest get 503 at once, so an
# outage never holds every worker thread (gunicorn's threads less four, by default).
TODO_MAX_CONCURRENT = env_int("TODO_MAX_CONCURRENT", max(1, _THREADS - 4), minimum=1)
# GET /todos without `limit` answers at most this many, the rest through its Link header.
TODO_LIST_MAX = env_int("TODO_LIST_MAX", 1000, minimum=1, maximum=1000)

# --- imagegen ---------------------------------------------------------------------------
MODEL_ID = env_str("MODEL_ID", DEFAULT_MODEL_ID)
MODEL_REVISION = env_str("MODEL_REVISION", "main")
# Which weight files to fetch ("fp16": half the download); they are upcast to fp32 on load.
# Empty means the repo's default (fp32) files.
MODEL_VARIANT = env_str("MODEL_VARIANT", "fp16")
# The mounted share (SMB on Azure). Nothing here ever takes a file lock on it.
MODEL_DIR = Path(env_str("MODEL_DIR", str(DATA_DIR / "models")))
# The hub client's own cache, on local disk, where its lock files are harmless.
DOWNLOAD_CACHE_DIR = Path(env_str("DOWNLOAD_CACHE_DIR", str(DATA_DIR / "download-cache")))
if DOWNLOAD_CACHE_DIR.resolve().is_relative_to(MODEL_DIR.resolve()):
    raise ImproperlyConfigured("DOWNLOAD_CACHE_DIR must be outside MODEL_DIR (locks)")
DOWNLOAD_WORKERS = env_int("DOWNLOAD_WORKERS", 8, minimum=1)
HF_ENDPOINT = env_str("HF_ENDPOINT", "") or None
HF_TOKEN = env_str("HF_TOKEN", "") or None
# hf_xet is huggingface_hub's fast transport (hf_transfer is gone since 1.0).
os.environ.setdefault("HF_XET_HIGH_PERFORMANCE", "1")
os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")

# More hub models offered beside MODEL_ID, comma-separated org/name[@revision]: each request
# may name one (imagegen/generation/catalog.py). Checked by the imagegen app (imagegen/checks.py).
MODELS = env_str("MODELS", "")
# Upscaler files offered by name beside Lanczos and Nearest, comma-separated repo:file[=name]
# (imagegen/model/upscalers/offered.py). Checked by the imagegen app (imagegen/checks.py).
UPSCALERS = env_str("UPSCALERS", "")
# Bytes an upscaler's tile may hold in activations (imagegen/generation/upscale.py); 0: auto, the
# smaller of 2 GiB and an eighth of the memory limit.
UPSCALE_TILE_MEMORY = env_int("UPSCALE_TILE_MEMORY", 0, minimum=0)
# LoRAs a prompt may name (<lora:name:weight>), comma-separated repo:file[=name], pulled with
# MODEL_ID into MODEL_DIR/loras (imagegen/model/loras.py); checked by imagegen/checks.py.
LORAS = env_str("LORAS", "")

# LoRA adapters fused into the UNet at load (imagegen/model/adapters.py): repo:file[:scale],...
# Absent: SDXL-Lightning's 4-step LoRA with the default MODEL_ID, none with another; set, even
# to empty (the base model as it is), it is taken as it is (env_str keeps an empty value).
MODEL_ADAPTERS = parse_adapters(env_str("MODEL_ADAPTERS", default_adapters(MODEL_ID)))
# A dedicated inpainting checkpoint (imagegen/model/inpaint.py): its UNet (9 input channels)
# runs every edit with a mask; empty: the base model's own UNet inpaints. Only its `unet`
# folder is pulled, into the model's directory: the text encoders and VAE are the base's.
INPAINT_MODEL = parse_inpaint(
    env_str("INPAINT_MODEL_ID", ""), env_str("INPAINT_MODEL_REVISION", "main")
)
# The decoder of latents into pixels (imagegen/model/decoder.py): "full" (the pipeline's VAE)
# or "tiny" (TAESD; VAE_DECODER_REPO, default by pipeline type: taesdxl for SDXL, else taesd).
# Absent: tiny for the shipped preset (the default MODEL_ID with its LoRA alone), else full.
VAE_DECODER = parse_decoder(
    env_str("VAE_DECODER", default_decoder(MODEL_ID, MODEL_ADAPTERS)),
    env_str("VAE_DECODER_REPO", ""),
)

# Live previews of a running job (imagegen/generation/previews.py): "approx" (a linear map of
# the latents, the default), "tiny" (the tiny decoder: needs VAE_DECODER=tiny) or "off". Made
# after every PREVIEW_EVERY steps, at least PREVIEW_SECONDS apart.
# Checked by the imagegen app when it is ready (imagegen/checks.py).
PREVIEW = env_str("PREVIEW", "approx")
PREVIEW_EVERY = env_int("PREVIEW_EVERY", 1, minimum=1)
PREVIEW_SECONDS = env_float("PREVIEW_SECONDS", 1.0, minimum=0)

DEVICE = env_str("DEVICE", "auto")
if DEVICE not in ("auto", "cpu", "cuda"):
    raise ImproperlyConfigured(f"DEVICE must be auto, cpu or cuda, got {DEVICE!r}")

# The contract's rule: attention slicing on. Each slice runs torch's fused attention kernel
# (imagegen/model/attention.py), so off only raises attention's memory, not its speed.
ATTENTION_SLICING = env_bool("ATTENTION_SLICING", True)
# Prompt encodings kept per loaded model (imagegen/model/prompt_cache.py); 0 keeps none.
PROMPT_CACHE = env_int("PROMPT_CACHE", 32, minimum=0, maximum=10_000)
# The full VAE decodes in tiles of this many pixels (where the model's own tiles are larger),
# so the decode's peak memory stays small; 0: diffusers' tiles (imagegen.model.pipeline).
# auto (None here): 256 where the memory limit needs it, else 512 (imagegen.model.memory).
_VAE_TILE_RULE = "VAE_TILE_SIZE must be auto, 0 or a multiple of 8 of at least 64"
_vae_tile = env_str("VAE_TILE_SIZE", "auto").strip() or "auto"
VAE_TILE_SIZE: int | None = None
if _vae_tile != "auto":
    if not _vae_tile.isdigit():
        raise ImproperlyConfigured(f"{_VAE_TILE_RULE}, got {_vae_tile!r}")
    VAE_TILE_SIZE = int(_vae_tile)
    if VAE_TILE_SIZE and (VAE_TILE_SIZE < 64 or VAE_TILE_SIZE % 8):
        raise ImproperlyConfigured(f"{_VAE_TILE_RULE}, got {VAE_TILE_SIZE}")

# Import the model-loading code when the worker starts (about 3 s), not during the first
# load, where its imports stall /health (imagegen/model/preload.py).
PRELOAD_MODEL_CODE = env_bool("PRELOAD_MODEL_CODE", True)

# Load the model from the share when the service starts (if a complete copy is there), so the
# first request after a restart does not wait for the load. Off: not_started until a pull or
# a generation.
WARM_START = env_bool("WARM_START", False)

# torch's CPU threads: "auto" = the container's CPU quota (cgroup), not the host's count.
TORCH_THREADS = env_str("TORCH_THREADS", "auto")
if TORCH_THREADS != "auto" and not (TORCH_THREADS.isdigit() and int(TORCH_THREADS) >= 1):
    raise ImproperlyConfigured(f"TORCH_THREADS must be auto or at least 1, got {TORCH_THREADS!r}")

# How far below the request threads the generating thread and its torch threads run (Linux
# nice values, 0 to 19): requests then get a core as soon as they wake during a generation;
# a generation alone still has every core (imagegen/generation/priority.py). 0: the same.
GEN_NICE = env_int("GEN_NICE", 10, minimum=0, maximum=19)

# Defaults of omitted fields. Unset (None): the configured model's preset, else 20 steps,
# guidance 7 and the model's own scheduler (imagegen/generation/presets.py).
GEN_DEFAULT_STEPS = env_int("GEN_DEFAULT_STEPS", None, minimum=1)
# At most 500: schedulers step through 1,000 training timesteps, and some add warm-up steps
# (PNDM): 1,000 asked-for steps ran off the end of the schedule and failed every such job.
GEN_MAX_STEPS = env_int("GEN_MAX_STEPS", 100, minimum=1, maximum=500)
GEN_DEFAULT_GUIDANCE = env_float("GEN_DEFAULT_GUIDANCE", None)
GEN_MAX_GUIDANCE = env_float("GEN_MAX_GUIDANCE", 30.0, minimum=0)
# One of the named schedulers (checked by the imagegen app: imagegen/checks.py).
GEN_DEFAULT_SCHEDULER = env_str("GEN_DEFAULT_SCHEDULER", "") or None
# Sent steps and guidance above these are lowered to them (and reported), not refused.
# Unset: the preset's maximum (none without a preset).
GEN_STEPS_CAP = env_int("GEN_STEPS_CAP", None, minimum=1)
GEN_GUIDANCE_CAP = env_float("GEN_GUIDANCE_CAP", None, minimum=0)
# Take the defaults, caps and schedulers of the model MODEL_ID and MODEL_ADAPTERS name
# (SDXL-Turbo, LCM, Hyper-SD, Lightning, TCD); off: no preset.
GEN_FOLLOW_MODEL = env_bool("GEN_FOLLOW_MODEL", True)
GEN_MIN_SIDE = env_int("GEN_MIN_SIDE", 64, minimum=8)
GEN_MAX_SIDE = env_int("GEN_MAX_SIDE", 2048, minimum=8)
# Generations run one at a time; this many more may wait, the rest get 503 + Retry-After.
GEN_QUEUE_MAX = env_int("GEN_QUEUE_MAX", 8, minimum=0)
# How long a synchronous /generate waits for its image (queue and run); then its job is
# cancelled and the answer is 504. Below Azure's 240 s ingress cut-off by default.
GEN_SYNC_TIMEOUT = env_int("GEN_SYNC_TIMEOUT", 230, minimum=1)
# A synchronous request whose estimate (from the steps and decodes measured here, the jobs
# ahead included) is past this many times GEN_SYNC_TIMEOUT is refused at once with a 400
# saying so, instead of a 504 after GEN_SYNC_TIMEOUT (imagegen/generation/estimates.py).
# 0: never refused; every synchronous request waits its GEN_SYNC_TIMEOUT out.
GEN_SYNC_REFUSE_FACTOR = env_float("GEN_SYNC_REFUSE_FACTOR", 1.25, minimum=0)
# The FLOP/s the estimate before any image divides the model's counted work by
# (imagegen/generation/work.py); 0: measured on the model's device in about a second, at its load.
GEN_THROUGHPUT = env_float("GEN_THROUGHPUT", 0.0, minimum=0)
GEN_LOAD_TIMEOUT = env_float("GEN_LOAD_TIMEOUT", 300.0, minimum=0.001)

# Images one OpenAI or AUTOMATIC1111 request may ask for (n; batch_size x n_iter); each is a
# job of its own in the queue, so by default no more than the queue can hold at once.
GEN_MAX_N = env_int("GEN_MAX_N", min(4, GEN_QUEUE_MAX + 1), minimum=1)
if GEN_MAX_N > GEN_QUEUE_MAX + 1:
    raise ImproperlyConfigured("GEN_MAX_N must be at most GEN_QUEUE_MAX + 1 (the queue's room)")
# How long an image link the OpenAI route answers (response_format=url) stays valid.
IMAGE_URL_TTL = env_int("IMAGE_URL_TTL", 3600, minimum=1)

# Event streams of jobs (GET /jobs/<id>/events). Each open stream holds one of gunicorn's
# threads for its whole life, so their number is bounded below the thread count (the next
# client gets 503 + Retry-After): /health and the other routes always keep threads.
EVENT_STREAMS_MAX = env_int("EVENT_STREAMS_MAX", max(1, _THREADS // 4), minimum=1)
if EVENT_STREAMS_MAX >= _THREADS:
    raise ImproperlyConfigured(
        f"EVENT_STREAMS_MAX must be below GUNICORN_THREADS ({_THREADS}), got {EVENT_STREAMS_MAX}"
    )
# Synchronous generations waiting at once (joiners of a twin's or an Idempotency-Key's job
# included): each holds a thread until its image; the next gets 503 + Retry-After. Below the
# thread count, with the event streams' places and two threads kept for everything else.
SYNC_WAITERS_MAX = env_int("SYNC_WAITERS_MAX", max(1, _THREADS - EVENT_STREAMS_MAX - 2), minimum=1)
if SYNC_WAITERS_MAX >= _THREADS:
    raise ImproperlyConfigured(
        f"SYNC_WAITERS_MAX must be below GUNICORN_THREADS ({_THREADS}), got {SYNC_WAITERS_MAX}"
    )
# With named keys (API_KEYS=1), what one key may hold of what all share: a percentage of
# GEN_QUEUE_MAX (its jobs queued or running) and a number of event streams (per process).
KEY_QUEUE_SHARE = env_int("KEY_QUEUE_SHARE", 50, minimum=1)
if KEY_QUEUE_SHARE > 100:
    raise ImproperlyConfigured(f"KEY_QUEUE_SHARE is a percentage, 1 to 100, got {KEY_QUEUE_SHARE}")
KEY_STREAMS_MAX = env_int("KEY_STREAMS_MAX", max(1, EVENT_STREAMS_MAX // 2), minimum=1)
# A stream ends itself after this many seconds, before Azure's ingress cuts a request at 240 s;
# clients resume it with Last-Event-ID and lose nothing.
EVENT_STREAM_SECONDS = env_float("EVENT_STREAM_SECONDS", 220.0, minimum=0.1)
# A comment line this often while nothing happens, so proxies keep an idle stream open.
EVENT_STREAM_KEEPALIVE = env_float("EVENT_STREAM_KEEPALIVE", 15.0, minimum=0.1)

# Generated images and their records (on Azure: a folder on the share).
OUTPUT_DIR = Path(env_str("OUTPUT_DIR", str(DATA_DIR / "images")))
# Finished jobs remembered by the process (GET /jobs); their images stay in OUTPUT_DIR.
JOBS_KEEP = env_int("JOBS_KEEP", 200, minimum=1)

# Distributed mode: unset, the web process runs the jobs itself (one in-process queue); a
# redis:// URL makes web processes only accept, look up and cancel jobs, kept in that Redis,
# and Celery workers (`manage.py run_worker`) run them (imagegen/distributed/).
JOB_BROKER_URL = env_str("JOB_BROKER_URL", "").strip()
if JOB_BROKER_URL and not JOB_BROKER_URL.startswith(("redis://", "rediss://", "unix://")):
    raise ImproperlyConfigured(
        f"JOB_BROKER_URL must be a redis://, rediss:// or unix:// URL, got {JOB_BROKER_URL!r}"
    )
# Every call to that Redis ends within this, its reconnects and retries included, whatever
# Redis does (a frozen one answers nothing): a job request that gets no answer in time
# answers 503 with Retry-After (imagegen/distributed/budget.py).
JOB_STORE_TIMEOUT_MS = env_int("JOB_STORE_TIMEOUT_MS", 5000, minimum=100)
# Calls that may wait on that Redis at once in one process; the next is refused at once (503),
# so a frozen Redis holds no more than this many of gunicorn's threads and /health keeps one.
JOB_STORE_MAX_CONCURRENT = env_int("JOB_STORE_MAX_CONCURRENT", max(1, _THREADS - 4), minimum=1)
if JOB_STORE_MAX_CONCURRENT >= _THREADS:
    raise ImproperlyConfigured(
        f"JOB_STORE_MAX_CONCURRENT must be below GUNICORN_THREADS ({_THREADS}), "
        f"got {JOB_STORE_MAX_CONCURRENT}"
    )
# A running job whose worker has not been heard of for this many seconds of the store being
# reachable is run again on another worker, once ("worker lost" the second time); its worker
# refreshes the job's heartbeat every third of it.
# At least 3: a waiting request's read (at least one a second: imagegen.distributed.changes)
# ticks the store's clock, which counts only gaps of at most half the TTL; with every worker
# dead those reads alone must still see a lost job's TTL pass.
JOB_HEARTBEAT_TTL = env_float("JOB_HEARTBEAT_TTL", 30.0, minimum=3.0)

if GEN_DEFAULT_STEPS is not None and not 1 <= GEN_DEFAULT_STEPS <= GEN_MAX_STEPS:
    raise ImproperlyConfigured("GEN_DEFAULT_STEPS must be between 1 and GEN_MAX_STEPS")
if GEN_DEFAULT_GUIDANCE is not None and not 0 <= GEN_DEFAULT_GUIDANCE <= GEN_MAX_GUIDANCE:
    raise ImproperlyConfigured("GEN_DEFAULT_GUIDANCE must be between 0 and GEN_MAX_GUIDANCE")
if (
    GEN_DEFAULT_STEPS is not None
    and GEN_STEPS_CAP is not None
    and GEN_DEFAULT_STEPS > GEN_STEPS_CAP
):
    raise ImproperlyConfigured("GEN_DEFAULT_STEPS must be at most GEN_STEPS_CAP")
if (
    GEN_DEFAULT_GUIDANCE is not None
    and GEN_GUIDANCE_CAP is not None
    and GEN_DEFAULT_GUIDANCE > GEN_GUIDANCE_CAP
):
    raise ImproperlyConfigured("GEN_DEFAULT_GUIDANCE must be at most GEN_GUIDANCE_CAP")
if GEN_MIN_SIDE % 8 or GEN_MAX_SIDE % 8 or GEN_MIN_SIDE > GEN_MAX_SIDE:
    raise ImproperlyConfigured("GEN_MIN_SIDE and GEN_MAX_SIDE: multiples of 8, min <= max")

# "text" (the default): one readable line per record; "json": one JSON object per line, with
# the request's id, route, status and duration and the job and worker when known
# (core.logs.JsonFormatter), for a log search (Log Analytics, Loki) to query by field.
LOG_FORMAT = env_str("LOG_FORMAT", "text")
if LOG_FORMAT not in ("text", "json"):
    raise ImproperlyConfigured(f"LOG_FORMAT must be text or json, got {LOG_FORMAT!r}")

# Webhooks (docs/image-api.md "Webhooks"): where an asynchronous job with no webhook_url of its
# own (nor its key's) is told it ended; the whsec_ secrets that sign every delivery (several,
# space-separated, while one is rotated: each signs); the hosts, addresses or CIDR networks a
# webhook may reach though they are not public (loopback, private, link-local); how long a
# delivery is retried before it is given up; how many deliveries are sent at once.
WEBHOOK_URL = env_str("WEBHOOK_URL", "").strip()
WEBHOOK_SECRET = env_str("WEBHOOK_SECRET", "").split()
for _secret in WEBHOOK_SECRET:
    if not _secret.startswith("whsec_") or len(_secret) < 16:
        raise ImproperlyConfigured(
            "WEBHOOK_SECRET: each secret is whsec_ and base64 (manage.py keys webhook-secret "
            "prints one), space-separated"
        )
WEBHOOK_ALLOW = env_list("WEBHOOK_ALLOW", [])
WEBHOOK_RETRY_SECONDS = env_int("WEBHOOK_RETRY_SECONDS", 86400, minimum=1)
WEBHOOK_SENDERS = env_int("WEBHOOK_SENDERS", 4, minimum=1, maximum=64)
# The origin (scheme://host[:port]) of the links a webhook carries; unset: the origin the
# submitting request reached (its forwarded one behind TRUSTED_PROXIES).
PUBLIC_URL = env_str("PUBLIC_URL", "").strip().rstrip("/")

# Distributed mode: the port on which a worker (manage.py run_worker) answers Prometheus'
# scrape of its own metrics (GET /metrics, on every address); 0: none (the container image
# sets 9100; off here, so workers started side by side on one host do not fight for a port).
WORKER_METRICS_PORT = env_int("WORKER_METRICS_PORT", 0, minimum=0, maximum=65535)
# Distributed mode: the offered models a worker may run, comma-separated repo ids or unique name
# parts (imagegen/distributed/pins.py); empty: every offered model.
WORKER_MODELS = env_str("WORKER_MODELS", "")
# Bytes the loaded models may use together (imagegen/model/shelf.py); 0: the container's
# memory.max, else the machine's memory.
MODEL_MEMORY_LIMIT = env_int("MODEL_MEMORY_LIMIT", 0, minimum=0)

# logging.config.dictConfig's schema: values of every kind, nested.
LOGGING: dict[str, Any] = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {
        "plain": {"format": "%(asctime)s %(levelname)s %(name)s: %(message)s"},
        "json": {"()": "core.logs.JsonFormatter"},
    },
    "filters": {"expected_answers": {"()": "core.logs.ExpectedAnswers"}},
    "handlers": {
        "console": {
            "class": "logging.StreamHandler",
            "formatter": "json" if LOG_FORMAT == "json" else "plain",
            "filters": ["expected_answers"],
        }
    },
    "root": {"handlers": ["console"], "level": env_str("LOG_LEVEL", "INFO")},
    "loggers": {
        "django.request": {"level": "ERROR"},
        # The hub client logs every HTTP request at INFO.
        "httpx": {"level": "WARNING"},
        "httpx2": {"level": "WARNING"},
    },
}
