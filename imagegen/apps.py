import sys
from pathlib import Path

from django.apps import AppConfig


def serves_requests() -> bool:
    """Whether this process is a web process (gunicorn, runserver, a test run), not a
    management command such as a worker or `keys`: only web processes send webhooks."""
    program = Path(sys.argv[0]).name
    if program == "celery":
        return False
    return not (program == "manage.py" and sys.argv[1:2] != ["runserver"])


class ImagegenConfig(AppConfig):
    name = "imagegen"

    def ready(self) -> None:
        from imagegen.checks import refuse_bad_settings

        refuse_bad_settings()  # before anything is built from them
        from core.logs import register_quiet_poll
        from imagegen.api.errors import register_error_shapes
        from imagegen.model.device import compute_device

        register_error_shapes()
        # The page's queue poll, every second while a job runs: logged at debug only.
        register_quiet_poll("GET", "/jobs", "unfinished=true")
        compute_device()  # resolved once at start, so /health never waits on it
        if serves_requests():
            from imagegen import services
            from imagegen.api.webhook_events import event_data
            from imagegen.backend import build_backend, install

            # The process's backend exists before any request thread; a management command
            # builds its own on first use (current_backend), if it needs one at all.
            backend = build_backend()
            install(backend)
            # Beside the requests, from the start: what a stopped process left is sent too.
            services.webhooks_start(backend, describe=event_data)
