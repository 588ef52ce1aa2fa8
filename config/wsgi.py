"""WSGI entry point for gunicorn (see scripts/serve and the Dockerfile)."""

import os

from django.core.wsgi import get_wsgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
application = get_wsgi_application()

from config.auth import warn_if_open  # noqa: E402  (needs the settings loaded above)

warn_if_open()
