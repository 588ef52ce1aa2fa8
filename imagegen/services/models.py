"""The model's pull: what POST /model/pull starts."""

from collections.abc import Sequence

from imagegen.backend import Backend
from imagegen.generation.prompt_tags import LoraTag
from imagegen.generation.requests import GenerationRequest
from imagegen.services.loras import with_loras


def model_pull(backend: Backend, *, model: str | None = None) -> bool:
    """Starts the download-and-load job of MODEL_ID, or of the offered model `model` names
    (imagegen.generation.catalog: a 400 naming `model` when none is offered by that name),
    unless one runs; False when already ready. In distributed mode the download runs here
    once and every running worker that may run the model (WORKER_MODELS) loads it. With no
    model named, the UPSCALERS files not on the share yet are fetched too, beside it."""
    if model is None:
        upscalers = backend.upscalers.start_pull()
        return backend.models.pull() or upscalers
    offered = backend.offered().find(model)
    if offered.default:
        return backend.models.pull()
    return backend.handle_of(offered).pull()


def with_model(
    backend: Backend, request: GenerationRequest, *, loras: Sequence[LoraTag] = ()
) -> GenerationRequest:
    """`request` with its `model` (a repo id or unique name part, as sent) made the offered
    model's repo id, or None for MODEL_ID; an unknown name is a 400 naming `model`. The
    prompt's LoRA tags, then `loras` (the native fields), are then checked for that model
    (imagegen.services.loras)."""
    if request.model is None:
        return with_loras(backend, request, fields=loras)
    offered = backend.offered().find(request.model)
    if offered.default:
        return with_loras(backend, request.model_copy(update={"model": None}), fields=loras)
    return with_loras(backend, request.model_copy(update={"model": offered.id}), fields=loras)
