"""An answer's image in the format the client asked for (OpenAI's `output_format`).

The store keeps only the PNG; JPEG or WebP is encoded on the way out. `output_compression`
(0-100) is the encoder's quality; PNG ignores it."""

import io
from typing import Literal

from PIL import Image

OutputFormat = Literal["png", "jpeg", "webp"]
MEDIA_TYPES: dict[str, str] = {"png": "image/png", "jpeg": "image/jpeg", "webp": "image/webp"}
COMPRESSION_DEFAULT = 100  # OpenAI's


def encoded(png: bytes, output_format: OutputFormat | None, compression: int | None) -> bytes:
    """None or png answers the bytes as they are."""
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
    """A JPEG preview in the asked format, for streamed partial images. None means png."""
    quality = COMPRESSION_DEFAULT if compression is None else compression
    buffer = io.BytesIO()
    with Image.open(io.BytesIO(image_bytes)) as image:
        image.convert("RGB").save(buffer, format=(output_format or "png").upper(), quality=quality)
    return buffer.getvalue()
