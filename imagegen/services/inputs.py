"""An edit's stored inputs live as long as something names them: an image, a job, or a
request still on its way to being queued."""

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

P = ParamSpec("P")
T = TypeVar("T")


def _prunes_refused_inputs(call: Callable[P, T]) -> Callable[P, T]:
    """An edit refused or ended without an image (its `request`'s inputs stored already:
    edit_request) leaves no input behind that nothing names (_prune_inputs)."""

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
    """An edit refused before its job was queued (a route's refusal too: no place to wait
    in) leaves no input behind that nothing names (_prune_inputs)."""
    if request.edit is not None:
        _prune_inputs(backend, input_digests(request.edit))


def image_delete(backend: Backend, *, image_id: str, seen_by: str | None = None) -> ImageRecord:
    """Removes a stored image (its PNG and its record) from OUTPUT_DIR, the one store of
    both job modes; answers the record it removed. The job that made it still names it in
    GET /jobs until the job is forgotten (JOBS_KEEP); its image_url then answers 404. An
    edit's inputs go with it unless another image or job names them (_prune_inputs)."""
    selectors.image_get(backend, image_id=image_id, seen_by=seen_by)  # another key's: 404
    record = backend.images.delete(image_id)
    if record is None:
        raise ImageNotFound()
    _prune_inputs(backend, input_digests(record.parameters.edit))
    return record


# An input named by no image and no unfinished job is removed once this old: younger, its
# request may still be on its way to being queued (save_input makes a reused one young).
INPUT_GRACE_SECONDS = 600


def _prune_inputs(backend: Backend, freed: set[str]) -> None:
    """Removes the inputs no stored image and no unfinished job names: those of `freed`
    (a deleted edit's, a refused edit's) at once, any other once INPUT_GRACE_SECONDS old
    (left by a crash). Nothing to free, nothing is read. An edit's source is the
    user's picture: it does not outlive what was made from it."""
    if not freed:  # a text-to-image delete: no scan of every record on the share for it
        return
    store = backend.images
    ages = store.input_ages()
    if not ages:
        return
    named: set[str] = set()
    for job in backend.jobs.unfinished():
        named |= input_digests(job.parameters.edit)
    for record in store.records():
        named |= input_digests(record.parameters.edit)
    for digest, age in ages.items():
        if digest not in named and (digest in freed or age > INPUT_GRACE_SECONDS):
            store.remove_input(digest)
