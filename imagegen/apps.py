from django.apps import AppConfig


class ImagegenConfig(AppConfig):
    name = "imagegen"

    def ready(self) -> None:
        from imagegen.device import compute_device

        compute_device()  # resolved once at start, so /health never waits on it
