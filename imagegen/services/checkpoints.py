"""The A1111 checkpoint a caller chose with POST /sdapi/v1/options: what its requests naming no
model run.

A1111 clients (Open WebUI, SillyTavern, webuiapi's util_set_model) switch the model once, wait
until /progress shows no job, then send requests naming none. So the choice is kept where jobs
are kept (Backend.checkpoints): per API key where keys are on, the whole service's otherwise.
In process the switch loads the model here, as A1111 does, waiting up to the caller's timeout.
In distributed mode web processes never load a model: a worker loads it with the first job
that runs it."""

from core.errors import FieldError
from imagegen.backend import Backend
from imagegen.errors import (
    ModelDownloading,
    ModelFailed,
    ModelLoading,
    ModelNotPulled,
    OfferedModelNotPulled,
    naming_model,
)
from imagegen.generation.catalog import OfferedModel, UnknownModel
from imagegen.model.status import State

CHECKPOINT = "sd_model_checkpoint"


def checkpoint_current(backend: Backend, *, scope: str | None) -> OfferedModel:
    """The model `scope` (a key's name; None: the whole service) chose, else MODEL_ID. A choice
    no longer offered (MODELS changed while Redis kept it) falls back to MODEL_ID."""
    chosen = backend.checkpoints.chosen(scope)
    catalog = backend.offered()
    return next((m for m in catalog.models if m.id == chosen), catalog.default)


def checkpoint_choose(backend: Backend, *, scope: str | None, name: str, timeout: float) -> bool:
    """Makes the model `name` names (a title /sd-models lists, a model name or a repo id)
    `scope`'s choice. True once it is loaded (or nothing is to wait for); False while its load
    outlasts `timeout` seconds.

    An unknown name is a 400 naming sd_model_checkpoint and listing the offered ids; another
    model than the current one not on the share a 409, before anything is kept: a switch never
    starts a download. The current one named again (Open WebUI posts back the options it read)
    changes nothing then: its requests answer the 409."""
    try:
        model = backend.offered().find(name)
    except UnknownModel as unknown:
        raise FieldError(CHECKPOINT, unknown.rule) from None
    loader = backend.loader_of(model)
    if loader.source.complete_manifest() is None:
        if model == checkpoint_current(backend, scope=scope):
            return True
        raise ModelNotPulled() if model.default else OfferedModelNotPulled(model.id)
    backend.checkpoints.choose(scope, model.id)
    if backend.distributed:
        return True
    try:
        loader.pipeline(timeout)
    except ModelLoading:
        return False
    except (ModelDownloading, ModelFailed) as exc:
        raise exc if model.default else naming_model(exc, model.id) from None
    return True


def checkpoint_switching(backend: Backend, *, scope: str | None) -> bool:
    """Whether the model `scope` chose is loading in this process now: /progress counts that
    load as a job, so clients wait for it as they wait for A1111's."""
    if backend.distributed or backend.checkpoints.chosen(scope) is None:
        return False
    model = checkpoint_current(backend, scope=scope)
    return backend.loader_of(model).status().state == State.LOADING.value
