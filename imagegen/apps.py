from django.apps import AppConfig


class ImagegenConfig(AppConfig):
    name = "imagegen"

    def ready(self) -> None:
        from imagegen.device import compute_device
        from imagegen.jobs import get_jobs

        compute_device()  # resolved once at start, so /health never waits on it
        get_jobs()  # the process's loader and job queue exist before any request thread
