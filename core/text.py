"""The project's one rule for "blank" text, for todo titles and image prompts alike.

A string is blank when nothing in it would show: it holds only whitespace (NBSP and the other
Unicode spaces included), control characters, format characters (zero-width space and
joiners, the BOM, bidi marks) and combining marks with no base character to sit on.
`str.strip()` alone misses the last three, so "\u200b" passed as a title while "\u00a0" did not.
"""

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


# Text that must show something: a todo's title, an image's prompt. Its length bounds are the
# field's own, given as its `= Field(...)` default so they are checked first ("" is too short,
# not blank); the refusal is a ValueError, which each service's error handler shapes (the todo
# envelope, the image service's `error` object, OpenAI's).
NotBlank = Annotated[str, AfterValidator(_not_blank)]
