"""An edit's stored inputs live as long as an image, a job or a pending request names them."""

import functools
from collections.abc import Callable
from typing import ParamSpec, TypeVar

from core.errors import ServiceError
from imagegen import selectors
from imagegen.backend import Backend
from imagegen.errors import ImageNotFound
from imagegen.generation.edit_inputs import input_digests
from imagegen.generation.images import ImageRecord
from imagegen.generation.requests import GenerationRequest
from imagegen.generation.upscale_request import upscale_inputs

P = ParamSpec("P")
T = TypeVar("T")


def _prunes_refused_inputs(call: Callable[P, T]) -> Callable[P, T]:
    """An edit refused or ended without an image leaves no unnamed input behind."""

    @functools.wraps(call)
    def wrapped(*args: P.args, **kwargs: P.kwargs) -> T:
        try:
            return call(*args, **kwargs)
        except ServiceError:
            backend = args[0] if args else kwargs["backend"]
            assert isinstance(backend, Backend)
            request = kwargs.get("request")
            if isinstance(request, GenerationRequest):
                inputs_release(backend, request)
            raise

    return wrapped


def inputs_release(backend: Backend, request: GenerationRequest) -> None:
    """An edit refused before queueing leaves no unnamed input behind."""
    if request.edit is not None or request.upscale is not None:
        _prune_inputs(backend, input_digests(request.edit) | upscale_inputs(request.upscale))


def image_delete(backend: Backend, *, image_id: str, seen_by: str | None = None) -> ImageRecord:
    """Removes a stored image and its record; answers the record.

    Its job still names it until forgotten (JOBS_KEEP), then image_url answers 404. The edit's
    inputs go too, unless another image or job names them."""
    selectors.image_get(backend, image_id=image_id, seen_by=seen_by)  # another key's: 404
    record = backend.images.delete(image_id)
    if record is None:
        raise ImageNotFound()
    freed = input_digests(record.parameters.edit) | upscale_inputs(record.parameters.upscale)
    _prune_inputs(backend, freed)
    return record


# An unnamed input is removed once this old. Younger, its request may still be on its way.
INPUT_GRACE_SECONDS = 600


def _prune_inputs(backend: Backend, freed: set[str]) -> None:
    """Removes inputs no image and no unfinished job names: `freed` at once, others after the
    grace.

    Nothing to free, nothing is read. A user's picture does not outlive what was made from it."""
    if not freed:  # a text-to-image delete: no scan of every record on the share for it
        return
    store = backend.images
    ages = store.input_ages()
    if not ages:
        return
    named: set[str] = set()
    for job in backend.jobs.unfinished():
        named |= input_digests(job.parameters.edit) | upscale_inputs(job.parameters.upscale)
    for record in store.records():
        named |= input_digests(record.parameters.edit) | upscale_inputs(record.parameters.upscale)
    for digest, age in ages.items():
        if digest not in named and (digest in freed or age > INPUT_GRACE_SECONDS):
            store.remove_input(digest)
