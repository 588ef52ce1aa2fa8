"""WSGI entry point for gunicorn.

Everything the service needs at start happens here or in the settings, never in gunicorn's
hooks. So a plain `gunicorn config.wsgi` works."""

import logging
import os
from wsgiref.types import WSGIApplication

from django.core.wsgi import get_wsgi_application

from core.file_modes import keep_new_files_private
from imagegen.model.malloc_arena import use_one_arena

# Before any thread starts: they all allocate from the main malloc arena, so the generation thread
# keeps the pages it frees. Here, not in a gunicorn hook, so every start gets it.
use_one_arena()
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
keep_new_files_private()  # files 0600, folders 0700 (core/file_modes.py)
# What gunicorn calls: Django's handler, then the same wrapped in ChunkedBodies.
application: WSGIApplication = get_wsgi_application()

from django.conf import settings  # noqa: E402

from core.chunked import ChunkedBodies  # noqa: E402

application = ChunkedBodies(application, max_bytes=settings.DATA_UPLOAD_MAX_MEMORY_SIZE)

from apikeys.auth import warn_if_open  # noqa: E402  (needs the settings loaded above)

warn_if_open()

# A web process of distributed mode (JOB_BROKER_URL) never loads the model: nothing to preload.
if settings.PRELOAD_MODEL_CODE and not settings.JOB_BROKER_URL:
    from imagegen.model.preload import import_loading_code

    try:
        import_loading_code()  # before the first request: see imagegen/model/preload.py
    except Exception:  # the todo API still serves; a load reports the same error
        logging.getLogger("imagegen.model.preload").exception("importing the model code failed")

# Distributed web processes never load the model. Workers do, at start with WARM_START.
if settings.WARM_START and not settings.JOB_BROKER_URL:
    from imagegen.backend import current_backend

    current_backend().loader.warm_start()  # in the background; /health answers meanwhile
