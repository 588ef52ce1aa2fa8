"""The project's one rule for "blank" text, for todo titles and image prompts alike.

A string is blank when nothing in it would show: it holds only whitespace (NBSP and the other
Unicode spaces included), control characters, format characters (zero-width space and
joiners, the BOM, bidi marks) and combining marks with no base character to sit on.
`str.strip()` alone misses the last three, so "\u200b" passed as a title while "\u00a0" did not.
"""

import unicodedata

_INVISIBLE = {"Cc", "Cf", "Mn", "Me", "Zs", "Zl", "Zp"}

NOT_BLANK = "must contain a visible character (not only spaces, zero-width or combining marks)"


def is_blank(text: str) -> bool:
    return all(char.isspace() or unicodedata.category(char) in _INVISIBLE for char in text)
