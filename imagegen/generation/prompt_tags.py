"""A1111's `<lora:name:weight>` tags in a prompt: found, checked, and taken out of the text the
text encoders see. The prompt as written (tags and all) is what the record and the infotext keep,
as A1111 keeps it. The native form's `lora=name:weight` fields and JSON's `loras` list are read
into the same kind of value, each naming its own field when refused."""

import math
import re
from dataclasses import dataclass

from core.errors import FieldError

TAG = re.compile(r"<lora:([^:>]*)(?::([^>]*))?>", re.IGNORECASE)
WEIGHT_LIMIT = 4.0  # a weight outside [-4, 4] is refused: far past any LoRA's useful range
FORM = "<lora:name> or <lora:name:weight>, the weight a number in [-4, 4]"
FIELD_FORM = "name or name:weight, the weight a number in [-4, 4]"
ITEM_FORM = '{"name": ..., "weight": ...}, the weight a number in [-4, 4]'


@dataclass(frozen=True)
class LoraTag:
    """One tag or field: the LoRA it names, its weight (1 when absent), the text as written and
    the request field it came from (its refusals name it)."""

    name: str
    weight: float
    written: str
    field: str = "prompt"


def lora_tags(prompt: str) -> list[LoraTag]:
    """The prompt's tags, in order. Raises FieldError naming `prompt` and the tag for a name
    left empty or a weight that is not a number in [-4, 4]."""
    tags = []
    for match in TAG.finditer(prompt):
        name, weight_text = match.group(1).strip(), match.group(2)
        if not name:
            raise FieldError("prompt", f"{match.group(0)} names no LoRA ({FORM})")
        weight = _weight(weight_text, written=match.group(0), field="prompt", form=FORM)
        tags.append(LoraTag(name, weight, match.group(0)))
    return tags


def _weight(text: str | None, *, written: str, field: str, form: str) -> float:
    try:
        weight = 1.0 if text is None else float(text.strip())
    except ValueError:
        weight = math.nan
    if not math.isfinite(weight) or abs(weight) > WEIGHT_LIMIT:
        raise FieldError(field, f"{written}: the weight must be in [-4, 4] ({form})")
    return weight


def lora_field(text: str) -> LoraTag:
    """One native `lora=name:weight` form field (weight 1 when absent). Raises FieldError
    naming `lora` for an empty name or a weight that is not a number in [-4, 4]."""
    name, colon, weight_text = text.strip().partition(":")
    if not name.strip():
        raise FieldError("lora", f"{text!r} names no LoRA ({FIELD_FORM})")
    weight = _weight(weight_text if colon else None, written=text, field="lora", form=FIELD_FORM)
    return LoraTag(name.strip(), weight, text.strip(), field="lora")


def lora_item(name: str, weight: float | None) -> LoraTag:
    """One `{name, weight}` of a JSON body's `loras` (weight 1 when absent), checked as a tag."""
    written = f"{name}:{1 if weight is None else weight:g}"
    if not name.strip():
        raise FieldError("loras", f"{written!r} names no LoRA ({ITEM_FORM})")
    text = None if weight is None else str(weight)
    return LoraTag(
        name.strip(), _weight(text, written=written, field="loras", form=ITEM_FORM), written,
        field="loras",
    )  # fmt: skip


def without_tags(prompt: str) -> str:
    """The prompt the text encoders see: its tags taken out, the spaces they leave closed up."""
    return re.sub(r"\s{2,}", " ", TAG.sub("", prompt)).strip()
