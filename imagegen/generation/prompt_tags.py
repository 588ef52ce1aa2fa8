"""A1111's `<lora:name:weight>` tags in a prompt: found, checked, and taken out of the text the
text encoders see. The prompt as written (tags and all) is what the record and the infotext keep,
as A1111 keeps it."""

import math
import re
from dataclasses import dataclass

from core.errors import FieldError

TAG = re.compile(r"<lora:([^:>]*)(?::([^>]*))?>", re.IGNORECASE)
WEIGHT_LIMIT = 4.0  # a weight outside [-4, 4] is refused: far past any LoRA's useful range
FORM = "<lora:name> or <lora:name:weight>, the weight a number in [-4, 4]"


@dataclass(frozen=True)
class LoraTag:
    """One tag: the LoRA it names, its weight (1 when absent) and the text as written."""

    name: str
    weight: float
    written: str


def lora_tags(prompt: str) -> list[LoraTag]:
    """The prompt's tags, in order. Raises FieldError naming `prompt` and the tag for a name
    left empty or a weight that is not a number in [-4, 4]."""
    tags = []
    for match in TAG.finditer(prompt):
        name, weight_text = match.group(1).strip(), match.group(2)
        if not name:
            raise FieldError("prompt", f"{match.group(0)} names no LoRA ({FORM})")
        try:
            weight = 1.0 if weight_text is None else float(weight_text.strip())
        except ValueError:
            weight = math.nan
        if not math.isfinite(weight) or abs(weight) > WEIGHT_LIMIT:
            raise FieldError("prompt", f"{match.group(0)}: the weight must be in [-4, 4] ({FORM})")
        tags.append(LoraTag(name, weight, match.group(0)))
    return tags


def without_tags(prompt: str) -> str:
    """The prompt the text encoders see: its tags taken out, the spaces they leave closed up."""
    return re.sub(r"\s{2,}", " ", TAG.sub("", prompt)).strip()
