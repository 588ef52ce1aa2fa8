from django.apps import AppConfig


class ImagegenConfig(AppConfig):
    name = "imagegen"

    def ready(self) -> None:
        from imagegen import backend
        from imagegen.model.device import compute_device

        compute_device()  # resolved once at start, so /health never waits on it
        backend.jobs()  # the process's backend exists before any request thread
