"""Django settings: every value comes from the environment, with defaults safe in production."""

import os
import secrets
from pathlib import Path

from django.core.exceptions import ImproperlyConfigured

from config.env import env_bool, env_float, env_int, env_list, env_str
from imagegen.model.adapters import parse_adapters
from imagegen.model.decoder import parse_decoder

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
    "imagegen",
]

MIDDLEWARE = [
    "config.middleware.AppVersionHeaderMiddleware",
    "config.middleware.ErrorShapeMiddleware",
    "config.middleware.HeadAsGetMiddleware",
    "django.middleware.security.SecurityMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.middleware.common.CommonMiddleware",
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

# --- todos -----------------------------------------------------------------------------
MONGODB_URI = env_str("MONGODB_URI", "mongodb://127.0.0.1:27017/todos")
# How long a request waits for an unreachable database before answering 503.
MONGODB_TIMEOUT_MS = env_int("MONGODB_TIMEOUT_MS", 2000, minimum=100)

# --- imagegen ---------------------------------------------------------------------------
MODEL_ID = env_str("MODEL_ID", "stabilityai/stable-diffusion-xl-base-1.0")
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

# LoRA adapters fused into the UNet at load (imagegen/model/adapters.py): repo:file[:scale],...
MODEL_ADAPTERS = parse_adapters(env_str("MODEL_ADAPTERS", ""))
# The decoder of latents into pixels (imagegen/model/decoder.py): "full" (the pipeline's VAE)
# or "tiny" (TAESD; VAE_DECODER_REPO, default by pipeline type: taesdxl for SDXL, else taesd).
VAE_DECODER = parse_decoder(env_str("VAE_DECODER", "full"), env_str("VAE_DECODER_REPO", ""))

DEVICE = env_str("DEVICE", "auto")
if DEVICE not in ("auto", "cpu", "cuda"):
    raise ImproperlyConfigured(f"DEVICE must be auto, cpu or cuda, got {DEVICE!r}")

# How the weights are loaded: "streaming" (cast in chunks into one block per file, peak
# near the fp32 size) or "diffusers" (its own loading: about 1.5x the fp32 size at the peak).
MODEL_LOADER = env_str("MODEL_LOADER", "streaming")
if MODEL_LOADER not in ("streaming", "diffusers"):
    raise ImproperlyConfigured(f"MODEL_LOADER must be streaming or diffusers, got {MODEL_LOADER!r}")

# The seed's rule: attention slicing on. Each slice runs torch's fused attention kernel
# (imagegen/model/attention.py), so off only raises attention's memory, not its speed.
ATTENTION_SLICING = env_bool("ATTENTION_SLICING", True)

# Import the model-loading code when the worker starts (about 3 s), not during the first
# load, where its imports stall /health (imagegen/model/preload.py).
PRELOAD_MODEL_CODE = env_bool("PRELOAD_MODEL_CODE", True)

# Load the model from the share when the service starts (if a complete copy is there), so the
# first request after a restart does not wait for the load. Off: the seed's not_started.
WARM_START = env_bool("WARM_START", False)

# torch's CPU threads: "auto" = the container's CPU quota (cgroup), not the host's count.
TORCH_THREADS = env_str("TORCH_THREADS", "auto")
if TORCH_THREADS != "auto" and not (TORCH_THREADS.isdigit() and int(TORCH_THREADS) >= 1):
    raise ImproperlyConfigured(f"TORCH_THREADS must be auto or at least 1, got {TORCH_THREADS!r}")

GEN_DEFAULT_STEPS = env_int("GEN_DEFAULT_STEPS", 20, minimum=1)
GEN_MAX_STEPS = env_int("GEN_MAX_STEPS", 100, minimum=1)
GEN_DEFAULT_GUIDANCE = env_float("GEN_DEFAULT_GUIDANCE", 7.0)
GEN_MAX_GUIDANCE = env_float("GEN_MAX_GUIDANCE", 30.0, minimum=0)
GEN_MIN_SIDE = env_int("GEN_MIN_SIDE", 64, minimum=8)
GEN_MAX_SIDE = env_int("GEN_MAX_SIDE", 2048, minimum=8)
# Generations run one at a time; this many more may wait, the rest get 503 + Retry-After.
GEN_QUEUE_MAX = env_int("GEN_QUEUE_MAX", 8, minimum=0)
# How long a synchronous /generate waits for its image (queue and run); then its job is
# cancelled and the answer is 504. Below Azure's 240 s ingress cut-off by default.
GEN_SYNC_TIMEOUT = env_int("GEN_SYNC_TIMEOUT", 230, minimum=1)
GEN_LOAD_TIMEOUT = env_float("GEN_LOAD_TIMEOUT", 300.0, minimum=0.001)

# Generated images and their records (on Azure: a folder on the share).
OUTPUT_DIR = Path(env_str("OUTPUT_DIR", str(DATA_DIR / "images")))
# Finished jobs remembered by the process (GET /jobs); their images stay in OUTPUT_DIR.
JOBS_KEEP = env_int("JOBS_KEEP", 200, minimum=1)

if not 1 <= GEN_DEFAULT_STEPS <= GEN_MAX_STEPS:
    raise ImproperlyConfigured("GEN_DEFAULT_STEPS must be between 1 and GEN_MAX_STEPS")
if not 0 <= GEN_DEFAULT_GUIDANCE <= GEN_MAX_GUIDANCE:
    raise ImproperlyConfigured("GEN_DEFAULT_GUIDANCE must be between 0 and GEN_MAX_GUIDANCE")
if GEN_MIN_SIDE % 8 or GEN_MAX_SIDE % 8 or GEN_MIN_SIDE > GEN_MAX_SIDE:
    raise ImproperlyConfigured("GEN_MIN_SIDE and GEN_MAX_SIDE: multiples of 8, min <= max")

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s: %(message)s"}},
    "filters": {"expected_answers": {"()": "config.logs.ExpectedAnswers"}},
    "handlers": {
        "console": {
            "class": "logging.StreamHandler",
            "formatter": "plain",
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
