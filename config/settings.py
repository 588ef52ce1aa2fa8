"""Django settings: every value comes from the environment, with defaults safe in production."""

import secrets
from pathlib import Path

from django.core.exceptions import ImproperlyConfigured

from config.env import env_bool, env_int, env_list, env_str

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

# Todos live in MongoDB (see todos/); nothing here needs Django's SQL database.
DATABASES: dict = {}

# The API docs' assets are served by WhiteNoise straight from the installed packages.
STATIC_URL = "static/"
WHITENOISE_USE_FINDERS = True
WHITENOISE_AUTOREFRESH = DEBUG
USE_TZ = True
TIME_ZONE = "UTC"

# --- todos -----------------------------------------------------------------------------
MONGODB_URI = env_str("MONGODB_URI", "mongodb://127.0.0.1:27017/todos")
# How long a request waits for an unreachable database before answering 503.
MONGODB_TIMEOUT_MS = env_int("MONGODB_TIMEOUT_MS", 2000, minimum=100)

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s: %(message)s"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain"}},
    "root": {"handlers": ["console"], "level": env_str("LOG_LEVEL", "INFO")},
    "loggers": {"django.request": {"level": "ERROR"}},
}
