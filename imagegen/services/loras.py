"""A request's LoRAs checked against the offered ones before anything is queued: its prompt's
`<lora:name:weight>` tags and the native `lora`/`loras` fields. An unknown name, a LoRA for
another model or a weight outside [-4, 4] is a 400 naming the field (`prompt` and the tag,
`lora` or `loras`), a LORAS entry not on the share a 409.

A LoRA named twice (two tags, or a tag and a field) runs once at the sum of its weights, as
A1111 runs it (each tag adds its delta; the deltas are linear in the weight), so the record
lists each LoRA once; a sum outside [-4, 4] is refused like a single weight."""

from collections.abc import Sequence

from django.conf import settings

from core.errors import FieldError
from imagegen.backend import Backend
from imagegen.errors import LoraNotPulled
from imagegen.generation.presets import lora_preset
from imagegen.generation.prompt_tags import WEIGHT_LIMIT, LoraTag, lora_tags
from imagegen.generation.requests import GenerationRequest, LoraUse
from imagegen.model.loras import LoraCatalog, OfferedLora


def with_loras(
    backend: Backend, request: GenerationRequest, *, fields: Sequence[LoraTag] = ()
) -> GenerationRequest:
    """`request` with the LoRAs its prompt's tags and then `fields` (the native form's) name
    (`loras`), each found, on the share and fitting the model that runs it (`request.model`,
    already an offered repo id, or MODEL_ID); each carries the few-step recipe it is, if any
    (GEN_FOLLOW_MODEL), whose preset then runs (imagegen.generation.parameters)."""
    asked = [*lora_tags(request.prompt), *fields]
    if not asked:
        return request
    catalog = backend.loras
    model_id = request.model or backend.offered().default.id
    uses: dict[str, LoraUse] = {}
    for tag in asked:
        lora = _checked(catalog, tag, model_id)
        assert catalog is not None  # _checked refuses every tag without one
        key = lora.name.lower()
        if key in uses:
            weight = uses[key].weight + tag.weight
            if abs(weight) > WEIGHT_LIMIT:
                raise FieldError(
                    tag.field,
                    f"{tag.written}: {lora.name} is named more than once; its weights add up "
                    f"to {weight:g}, outside [-4, 4]",
                )
            uses[key] = uses[key].model_copy(update={"weight": weight})
            continue
        uses[key] = LoraUse(
            name=lora.name, weight=tag.weight,
            path=lora.path.relative_to(catalog.model_dir).as_posix(),
            hash=catalog.short_hash(lora), preset=_recipe(lora),
        )  # fmt: skip
    return request.model_copy(update={"loras": tuple(uses.values())})


def _checked(catalog: LoraCatalog | None, tag: LoraTag, model_id: str) -> OfferedLora:
    """The offered LoRA `tag` names, on the share and fitting `model_id`."""
    lora = catalog.find(tag.name) if catalog is not None else None
    if catalog is None or lora is None:
        offered = catalog.offered() if catalog is not None else []
        names = ", ".join(o.name for o in offered) or "none (LORAS, MODEL_DIR/loras)"
        raise FieldError(
            tag.field, f"{tag.written}: no LoRA {tag.name!r} is offered; offered: {names}"
        )
    if not catalog.on_share(lora):
        raise LoraNotPulled(tag.written, lora.name)
    fits = catalog.fitting_models(lora)
    if model_id not in fits:
        family = ", ".join(fits) or "none of the models on the share"
        raise FieldError(
            tag.field, f"{tag.written}: {lora.name} is a LoRA for {family}, not for {model_id}"
        )
    return lora


def _recipe(lora: OfferedLora) -> str | None:
    """The name of the few-step preset the LoRA is (by its repo and file, or its file's name),
    or None; none at all with GEN_FOLLOW_MODEL off."""
    if not settings.GEN_FOLLOW_MODEL:
        return None
    if lora.entry is not None:
        preset = lora_preset(repo=lora.entry.repo, file=lora.entry.file)
    else:
        preset = lora_preset(repo=None, file=lora.path.name)
    return None if preset is None else preset.name
