"""OpenAI's streamed images (`stream: true`, `partial_images` 0-3): Server-Sent Events as the
openai SDK parses them (openai/_streaming.py: each `data:` is one JSON object carrying its
`type`; types/image_gen_partial_image_event.py, image_gen_completed_event.py and their
image_edit_* twins name the fields).

Why its own module: the generation is the service's own job, submitted as any other; this
module only follows the job (the event stream's wait on its revision) and speaks OpenAI's
events. The partial images are the job's previews at the steps the job was told to make
them (GenerationRequest.partial_images, imagegen.generation.previews.partial_steps), so the
N asked for are spread over the steps whatever PREVIEW_EVERY and PREVIEW_SECONDS say (a job
of fewer steps than N + 1 has fewer such steps, and sends fewer), and the job keeps each
apart from its latest preview, so a stream that wakes late still sends every one.
"""

import base64
import json
import time
from collections.abc import Callable, Generator
from typing import Any

from django.conf import settings
from django.http import StreamingHttpResponse

from imagegen import selectors, services
from imagegen.api import places
from imagegen.backend import current_backend
from imagegen.errors import JobNotFound
from imagegen.generation.events import ClosingStream
from imagegen.generation.job_board import FINISHED, JobState
from imagegen.generation.output_formats import OutputFormat, converted, encoded
from imagegen.generation.requests import GenerationRequest

GENERATION, EDIT = "image_generation", "image_edit"


def sse(kind: str, data: dict[str, Any]) -> bytes:
    return f"event: {kind}\ndata: {json.dumps(data, separators=(',', ':'))}\n\n".encode()


def _common(output_format: OutputFormat | None, size: str) -> dict[str, Any]:
    return {"created_at": int(time.time()), "size": size, "quality": "auto",
            "background": "opaque", "output_format": output_format or "png"}  # fmt: skip


NO_USAGE = {"input_tokens": 0, "output_tokens": 0, "total_tokens": 0,
            "input_tokens_details": {"image_tokens": 0, "text_tokens": 0}}  # fmt: skip


def image_events(
    *,
    job_id: str,
    prefix: str,
    partials: int,
    output_format: OutputFormat | None,
    compression: int | None,
    keepalive: float,
) -> Generator[bytes, None, None]:
    """The events of one streamed image: up to `partials` partial images, then the completed
    one, or an `error` event when the job fails or is cancelled (the SDK raises it)."""
    revision, index = -1, 0
    while True:
        try:
            view = selectors.job_wait(
                current_backend(), job_id=job_id, after=revision, timeout=keepalive
            )
        except JobNotFound:
            yield sse("error", {"type": "error", "error": {"message": "the job is gone"}})
            return
        if view.revision == revision:
            yield b": keep-alive\n\n"
            continue
        revision = view.revision
        while index < partials and (
            found := selectors.job_preview(current_backend(), job_id=job_id, partial=index)
        ):
            data = converted(found.data, output_format, compression)
            yield sse(f"{prefix}.partial_image", {
                "type": f"{prefix}.partial_image", "b64_json": base64.b64encode(data).decode(),
                "partial_image_index": index,
                **_common(output_format, f"{found.width}x{found.height}"),
            })  # fmt: skip
            index += 1
        if view.state is JobState.SUCCEEDED and view.image is not None:
            png = selectors.image_png(current_backend(), image_id=view.image.id).read_bytes()
            data = encoded(png, output_format, compression)
            size = f"{view.image.parameters.width}x{view.image.parameters.height}"
            yield sse(f"{prefix}.completed", {
                "type": f"{prefix}.completed", "b64_json": base64.b64encode(data).decode(),
                **_common(output_format, size), "usage": NO_USAGE,
            })  # fmt: skip
            return
        if view.state in FINISHED:
            message = view.error or f"the job was {view.state.value}"
            yield sse("error", {"type": "error", "error": {"message": message, "code": None}})
            return


def streamed_image(
    request: GenerationRequest,
    *,
    client: str,
    prefix: str,
    key: str | None,
    key_limit: int | None,
    stream_key: str | None,
    partials: int,
    output_format: OutputFormat | None,
    compression: int | None,
) -> StreamingHttpResponse:
    """Submits the job (refused at once, as JSON, when it cannot be queued), then streams it;
    the stream holds one of EVENT_STREAMS_MAX places while open (and of its `stream_key`'s
    KEY_STREAMS_MAX)."""
    give_back: Callable[[], None] = places.event_stream_place(stream_key)
    try:
        job = services.generation_submit(
            current_backend(),
            request=request.model_copy(update={"partial_images": partials}),
            client=client,
            key_name=key,
            key_limit=key_limit,
        )
    except Exception:
        give_back()
        raise
    chunks = image_events(
        job_id=job.id, prefix=prefix, partials=partials, output_format=output_format,
        compression=compression, keepalive=settings.EVENT_STREAM_KEEPALIVE,
    )  # fmt: skip
    headers = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
    return StreamingHttpResponse(
        ClosingStream(chunks, give_back), content_type="text/event-stream", headers=headers
    )
