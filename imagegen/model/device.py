"""The compute device of this process, resolved once from DEVICE (auto, cpu or cuda)."""

from functools import cache
from importlib.metadata import PackageNotFoundError, version

from django.conf import settings


@cache
def compute_device() -> str:
    if settings.DEVICE != "auto":
        return settings.DEVICE
    # A CPU build of torch (the pinned `+cpu` wheel) has no CUDA. Its version says so without the
    # 2-3 s import of torch. So /health and the todo API answer sooner. A distributed web replica
    # never imports torch.
    if cpu_only_torch():
        return "cpu"
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def cpu_only_torch() -> bool:
    try:
        return version("torch").endswith("+cpu")
    except PackageNotFoundError:
        return False
