"""A request's `<lora:name:weight>` tags checked against the offered LoRAs before anything is
queued: an unknown name, a LoRA for another model or a weight outside [-4, 4] is a 400 naming
the tag, a LORAS entry not on the share a 409."""

from core.errors import FieldError
from imagegen.backend import Backend
from imagegen.errors import LoraNotPulled
from imagegen.generation.prompt_tags import lora_tags
from imagegen.generation.requests import GenerationRequest, LoraUse


def with_loras(backend: Backend, request: GenerationRequest) -> GenerationRequest:
    """`request` with the LoRAs its prompt's tags name (`loras`), each found, on the share and
    fitting the model that runs it (`request.model`, already an offered repo id, or MODEL_ID)."""
    tags = lora_tags(request.prompt)
    if not tags:
        return request
    catalog = backend.loras
    offered = catalog.offered() if catalog is not None else []
    model_id = request.model or backend.offered().default.id
    uses = []
    for tag in tags:
        lora = catalog.find(tag.name) if catalog is not None else None
        if catalog is None or lora is None:
            names = ", ".join(o.name for o in offered) or "none (LORAS, MODEL_DIR/loras)"
            raise FieldError(
                "prompt", f"{tag.written}: no LoRA {tag.name!r} is offered; offered: {names}"
            )
        if not catalog.on_share(lora):
            raise LoraNotPulled(tag.written, lora.name)
        fits = catalog.fitting_models(lora)
        if model_id not in fits:
            family = ", ".join(fits) or "none of the models on the share"
            raise FieldError(
                "prompt", f"{tag.written}: {lora.name} is a LoRA for {family}, not for {model_id}"
            )
        path = lora.path.relative_to(catalog.model_dir).as_posix()
        uses.append(
            LoraUse(name=lora.name, weight=tag.weight, path=path, hash=catalog.short_hash(lora))
        )
    return request.model_copy(update={"loras": tuple(uses)})
