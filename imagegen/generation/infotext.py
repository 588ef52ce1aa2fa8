"""A PNG's generation parameters read back, as A1111's "PNG Info" reads them.

A1111 clients use it to reuse a prompt and seed. The parse follows A1111's, so a PNG from either
reads the same."""

import json
import re
from dataclasses import dataclass
from typing import Any

from PIL import Image

# A1111's re_param: a key, then a quoted (JSON-escaped) value or anything up to the next comma. No
# part can give back what it matched (possessive quantifiers), and the key is bounded. A1111's
# leading `\s*` and unbounded key made a long run of spaces cost quadratic time: a PNG of a few
# hundred bytes held the interpreter for seconds.
_PARAM = re.compile(r'(\w[\w \-/]{0,63}+):\s*+("(?:\\.|[^\\"])++"|[^,]*+)(?:,|$)')
_SIZE = re.compile(r"^(\d+)x(\d+)$")
NEGATIVE = "Negative prompt:"
# The most of a `parameters` text that is parsed. A1111 texts are a few KB; Pillow reads chunks up
# to 1 MB. Beyond this, the text is answered in `info` but not parsed.
MAX_PARSED = 65_536


def parse_infotext(text: str) -> dict[str, Any]:
    """Prompt, Negative prompt, and each `Key: value` of the last line.

    The last line counts only when it has at least three pairs, as in A1111."""
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
    """A quoted value's text, JSON-unescaped, as A1111's unquote does.

    Text that is not a JSON string (say, an escaped closing quote) stays as it is."""
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
    """What A1111's png-info answers. The caller opens `image` within its bounds."""
    text = {str(key): value for key, value in image.info.items() if isinstance(value, str)}
    info = text.pop("parameters", "")
    return PngInfo(info=info, items=text, parameters=parse_infotext(info) if info else {})
