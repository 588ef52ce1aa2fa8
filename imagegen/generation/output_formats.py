"""An answer's image in the format a client asked for (OpenAI's `output_format`).

Why a module of its own: the stored image is always the PNG the job wrote (its record and
its parameters in text chunks stay whole, and every other route serves it as it is); a
client that asks for JPEG or WebP gets that PNG re-encoded on the way out, at the quality
it asked for, and the store never holds a second copy.

`output_compression` (0-100, OpenAI's name) is the encoder's quality: 100, OpenAI's default,
is the best picture and the largest file, lower numbers trade picture for size. A PNG is
lossless, so the number changes nothing there.
"""

import io
from typing import Literal

from PIL import Image

OutputFormat = Literal["png", "jpeg", "webp"]
MEDIA_TYPES: dict[str, str] = {"png": "image/png", "jpeg": "image/jpeg", "webp": "image/webp"}
COMPRESSION_DEFAULT = 100  # OpenAI's


def encoded(png: bytes, output_format: OutputFormat | None, compression: int | None) -> bytes:
    """`png` as `output_format` (None or png: the bytes as they are)."""
    if output_format in (None, "png"):
        return png
    quality = COMPRESSION_DEFAULT if compression is None else compression
    buffer = io.BytesIO()
    with Image.open(io.BytesIO(png)) as image:
        image.convert("RGB").save(buffer, format=output_format.upper(), quality=quality)
    return buffer.getvalue()


def converted(
    image_bytes: bytes, output_format: OutputFormat | None, compression: int | None
) -> bytes:
    """Any image (a JPEG preview) as `output_format` (None: png), for a streamed partial image
    in the format the client asked for."""
    quality = COMPRESSION_DEFAULT if compression is None else compression
    buffer = io.BytesIO()
    with Image.open(io.BytesIO(image_bytes)) as image:
        image.convert("RGB").save(buffer, format=(output_format or "png").upper(), quality=quality)
    return buffer.getvalue()
