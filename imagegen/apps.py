from django.apps import AppConfig


class ImagegenConfig(AppConfig):
    name = "imagegen"

    def ready(self) -> None:
        from imagegen.device import compute_device
        from imagegen.generation import get_generator

        compute_device()  # resolved once at start, so /health never waits on it
        get_generator()  # the process's loader and generator exist before any request thread
