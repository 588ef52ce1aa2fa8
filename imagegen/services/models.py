"""The model's pull: what POST /model/pull starts."""

from imagegen.backend import Backend


def model_pull(backend: Backend) -> bool:
    """Starts the download-and-load job unless one runs; False when already ready. In
    distributed mode the download runs here once and every running worker loads."""
    return backend.models.pull()
