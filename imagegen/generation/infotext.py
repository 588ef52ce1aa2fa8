"""A PNG's generation parameters read back, as A1111's "PNG Info" reads them.

Why: every PNG this service writes carries A1111's `parameters` text (imagegen.generation.
images.GenerationParameters.a1111_text), and A1111's clients read it back through
`POST /sdapi/v1/png-info` to reuse a picture's prompt and seed. The parse follows A1111's
parse_generation_parameters (modules/infotext_utils.py) so a PNG from either reads the same:
the prompt's lines, then "Negative prompt:" and its lines, then the last line's
`Key: value` pairs; values stay text, `WxH` values are split into `Key-1` and `Key-2`.
"""

import json
import re
from dataclasses import dataclass
from typing import Any

from PIL import Image

# A1111's re_param: a key, then a quoted value (JSON-escaped) or anything to the next comma.
# Written so that no part can give back what it matched (possessive quantifiers), and without
# A1111's leading `\s*`, which only skips what the search skips anyway: with it, or with an
# unbounded key, a long run of spaces costs time in the square of its length (a PNG of a few
# hundred bytes held the interpreter for seconds). The key is bounded (A1111's is not).
_PARAM = re.compile(r'(\w[\w \-/]{0,63}+):\s*+("(?:\\.|[^\\"])++"|[^,]*+)(?:,|$)')
_SIZE = re.compile(r"^(\d+)x(\d+)$")
NEGATIVE = "Negative prompt:"
# The most of a `parameters` text that is parsed: an A1111 text is a few KB; Pillow reads
# text chunks of up to 1 MB, and what is beyond this is answered in `info` but not parsed.
MAX_PARSED = 65_536


def parse_infotext(text: str) -> dict[str, Any]:
    """A1111's infotext as a dict: Prompt, Negative prompt, and each `Key: value` of its
    last line (when that line has at least three, as A1111 decides)."""
    *lines, last = text[:MAX_PARSED].strip().split("\n")
    if len(_PARAM.findall(last)) < 3:
        lines, last = [*lines, last], ""
    prompt: list[str] = []
    negative: list[str] = []
    in_negative = False
    for line in (line.strip() for line in lines):
        if line.startswith(NEGATIVE):
            in_negative, line = True, line[len(NEGATIVE) :].strip()
        (negative if in_negative else prompt).append(line)
    parsed: dict[str, Any] = {"Prompt": "\n".join(prompt), "Negative prompt": "\n".join(negative)}
    for key, value in _PARAM.findall(last):
        if len(value) > 1 and value[0] == value[-1] == '"':
            value = _unquoted(value)
        if size := _SIZE.match(value):
            parsed[f"{key}-1"], parsed[f"{key}-2"] = size.groups()
        else:
            parsed[key] = value
    return parsed


def _unquoted(value: str) -> str:
    """A quoted value's text, as A1111's unquote: JSON's unescaping, or the text as it is
    when it is not a JSON string (a quote escaped at its end, say)."""
    try:
        text = json.loads(value)
    except ValueError:
        return value
    return text if isinstance(text, str) else value


@dataclass(frozen=True)
class PngInfo:
    info: str  # the `parameters` text, "" when there is none
    items: dict[str, str]  # the image's other text chunks
    parameters: dict[str, Any]  # `info` parsed


def png_info(image: Image.Image) -> PngInfo:
    """What A1111's png-info answers for `image` (opened by the caller, within its bounds)."""
    text = {str(key): value for key, value in image.info.items() if isinstance(value, str)}
    info = text.pop("parameters", "")
    return PngInfo(info=info, items=text, parameters=parse_infotext(info) if info else {})
