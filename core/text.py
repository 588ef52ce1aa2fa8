"""The one rule for "blank" text, for todo titles and prompts alike.

Blank text has only whitespace, control or format characters, and unattached combining marks.
`str.strip()` misses the last three."""

import unicodedata
from typing import Annotated

from pydantic import AfterValidator

_INVISIBLE = {"Cc", "Cf", "Mn", "Me", "Zs", "Zl", "Zp"}

NOT_BLANK = "must contain a visible character (not only spaces, zero-width or combining marks)"


def is_blank(text: str) -> bool:
    return all(char.isspace() or unicodedata.category(char) in _INVISIBLE for char in text)


def _not_blank(value: str) -> str:
    if is_blank(value):
        raise ValueError(NOT_BLANK)
    return value


# Text that must show something. Length bounds come first, so "" is too short, not blank. The
# refusal is a ValueError, shaped by each service's handler.
NotBlank = Annotated[str, AfterValidator(_not_blank)]
