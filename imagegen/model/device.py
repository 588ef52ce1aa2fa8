"""The compute device of this process, resolved once from DEVICE (auto, cpu or cuda)."""

from functools import cache

from django.conf import settings


@cache
def compute_device() -> str:
    if settings.DEVICE != "auto":
        return settings.DEVICE
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"
