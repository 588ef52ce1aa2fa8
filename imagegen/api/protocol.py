"""What the protocol adapters (OpenAI, AUTOMATIC1111) do alike: a synchronous request for n
images through the shared runs, and an image as the base64 text both protocols answer with.

Each protocol module keeps only its own shapes; the call into the service is written once, so
who "this client" is (apikeys.auth.client_identity), which header names a retry
(Idempotency-Key) and how long a request waits (GEN_SYNC_TIMEOUT) cannot differ between them.
"""

import base64
import binascii
from urllib.parse import urlencode

from django.conf import settings
from django.http import HttpRequest

from apikeys.auth import client_identity, owner_key, public_origin, queue_limit, request_caller
from core.errors import FieldError
from imagegen import selectors, services
from imagegen.api import places
from imagegen.backend import current_backend
from imagegen.generation.images import ImageRecord
from imagegen.generation.requests import GenerationRequest

NOT_BASE64 = "must be base64 text (a `data:...;base64,` prefix allowed) of an image"


def decode_base64(text: str, *, field: str) -> bytes:
    """An image sent as base64 text, as every protocol takes one: a data URL's prefix and
    whitespace (line breaks of wrapped base64) allowed, anything else refused naming `field`."""
    if text.startswith("data:"):  # data:[<media type>][;base64],<data>
        text = text.partition(",")[2]
    try:
        return base64.b64decode("".join(text.split()), validate=True)
    except (binascii.Error, ValueError):
        raise FieldError(field, NOT_BASE64) from None


def signed_image_link(
    request: HttpRequest,
    image_id: str,
    *,
    output_format: str | None = None,
    compression: int | None = None,
) -> str:
    """The image's link that works without the token for IMAGE_URL_TTL seconds (the OpenAI
    route's `url`), re-encoded to `output_format` when one is named."""
    query = {
        "signature": selectors.image_link_signature(
            image_id=image_id, output_format=output_format, compression=compression
        )
    }
    if output_format is not None:
        query["output_format"] = output_format
        if compression is not None:
            query["output_compression"] = str(compression)
    return f"{public_origin(request)}/v1/images/{image_id}.png?{urlencode(query)}"


def admit(request: HttpRequest, count: int) -> None:
    """Refuses with 429 a generating request of an API key past its `--max-queued` (or its
    share of the queue: apikeys.auth.queue_limit) or `--per-minute` (services.key_admit);
    every generating route calls it first, before an edit's images are decoded."""
    caller = request_caller(request)
    limit = queue_limit(request)
    if caller is not None and (limit or caller.per_minute):
        services.key_admit(
            current_backend(),
            key_name=caller.name,
            max_queued=limit,
            per_minute=caller.per_minute,
            count=count,
        )


def run_for_client(
    request: HttpRequest,
    generation: GenerationRequest,
    *,
    count: int,
    partial: bool = False,
    admitted: bool = False,
) -> list[ImageRecord]:
    """`count` images for this client; an identical request or a retry joins its twin's jobs
    (services.generation_run_shared). `partial`: a cancelled job leaves its image out
    instead of failing the request (A1111's interrupt). `admitted`: admit ran already (an
    edit's route runs it before decoding the images)."""
    if not admitted:
        admit(request, count)
    backend = current_backend()
    with places.sync_waiter_place(backend, generation):
        return services.generation_run_shared(
            backend,
            request=generation,
            count=count,
            client=client_identity(request),
            idempotency_key=request.headers.get("Idempotency-Key"),
            timeout=settings.GEN_SYNC_TIMEOUT,
            partial=partial,
            key_name=owner_key(request),
            key_limit=queue_limit(request),
        )


def png_base64(record: ImageRecord) -> str:
    return base64.b64encode(
        selectors.image_png(current_backend(), image_id=record.id).read_bytes()
    ).decode()
