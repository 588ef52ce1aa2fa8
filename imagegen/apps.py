from django.apps import AppConfig


class ImagegenConfig(AppConfig):
    name = "imagegen"

    def ready(self) -> None:
        from imagegen.generation.jobs import get_jobs
        from imagegen.model.device import compute_device

        compute_device()  # resolved once at start, so /health never waits on it
        get_jobs()  # the process's loader and job queue exist before any request thread
