"""The model's pull: what POST /model/pull starts."""

from imagegen.backend import Backend
from imagegen.errors import ModelPullNotHere


def model_pull(backend: Backend, *, model: str | None = None) -> bool:
    """Starts the download-and-load job of MODEL_ID, or of the offered model `model` names
    (imagegen.generation.catalog: a 400 naming `model` when none is offered by that name),
    unless one runs; False when already ready. In distributed mode the download runs here
    once and every running worker loads; the workers load MODEL_ID alone so far, so another
    model is refused there (501)."""
    if model is None:
        return backend.models.pull()
    offered = backend.offered().find(model)
    if offered.default:
        return backend.models.pull()
    if backend.distributed:
        raise ModelPullNotHere(offered.id)
    return backend.loader_of(offered).pull()
