"""The Model Context Protocol's tools behind /mcp (imagegen/api/mcp.py): generate and edit
an image, list the models, get and cancel a job, over streamable HTTP with the official SDK's
server.

A thin translator, as the OpenAI routes are: each tool calls the service or selector a native
route calls, for the caller the route authenticated (a key sees its own jobs and images only),
and answers in MCP's shapes: a finished image as image content beside its signed link. A
generation that waits reports its progress as MCP progress notifications and is bound as any
synchronous request (a SYNC_WAITERS_MAX place held while it waits, refused at once past its
estimate, cancelled at GEN_SYNC_TIMEOUT).

The SDK's server is an ASGI app; core/asgi_bridge.py answers it from the Django route.
It runs stateless (each POST on its own, no session kept), so any web replica or gunicorn
worker can answer any call. The route imports this module on its first call: the SDK and its
types are about a third of what a web process imports to serve its first request.
"""

import contextlib
import functools
import json
import threading
import time
from collections.abc import Callable
from dataclasses import replace
from typing import Annotated, Any, TypeVar

import anyio.to_thread
from django.conf import settings
from django.http import HttpRequest
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.transport_security import TransportSecuritySettings
from mcp_types import CallToolResult, ImageContent, ResourceLink, TextContent, ToolAnnotations
from pydantic import AfterValidator, Field

from apikeys.auth import owner_key, queue_limit, seen_by
from core.asgi_bridge import REQUEST_KEY, AsgiBridge
from core.errors import FieldError, ServiceError
from core.text import NotBlank
from core.version import app_version
from imagegen import selectors, services
from imagegen.api import places
from imagegen.api.bounds import AtMost
from imagegen.api.protocol import admit, decode_base64, png_base64, signed_image_link
from imagegen.api.schemas import PROMPT_MAX, JobOut, check_size, parse_size
from imagegen.backend import current_backend
from imagegen.errors import PastSyncTimeout, SyncTimeout, SyncWaitersBusy
from imagegen.generation.job_board import FINISHED, JobState, JobView
from imagegen.generation.requests import (
    SEED_MAX,
    STRENGTH_DEFAULT,
    GenerationRequest,
)

T = TypeVar("T")


def _size(value: str | None) -> str | None:
    return None if value is None else check_size(value)


Prompt = Annotated[NotBlank, Field(min_length=1, max_length=PROMPT_MAX, description="what to draw")]
NegativePrompt = Annotated[
    str | None, Field(max_length=PROMPT_MAX, description="what to keep out of the image")
]
Size = Annotated[
    str | None,
    AfterValidator(_size),
    Field(
        description=f"WIDTHxHEIGHT, multiples of 8 from {settings.GEN_MIN_SIDE} to "
        f"{settings.GEN_MAX_SIDE}; default the model's native size (an edit's: the image's)"
    ),
]
Steps = Annotated[
    Annotated[int, AtMost("GEN_MAX_STEPS")] | None,
    Field(ge=1, description="default the model's preset"),
]
Guidance = Annotated[
    Annotated[float, AtMost("GEN_MAX_GUIDANCE")] | None,
    Field(ge=0, allow_inf_nan=False, description="default: preset"),
]
Seed = Annotated[int | None, Field(ge=0, le=SEED_MAX, description="default: a random one")]
Wait = Annotated[
    bool,
    Field(
        description="true: wait for the image (with progress), up to the service's synchronous "
        "bound; false: answer the queued job at once, to follow with get_job"
    ),
]
Strength = Annotated[
    float | None,
    Field(gt=0, le=1, allow_inf_nan=False, description=f"how far the image is redrawn, "
          f"0 < s <= 1, default {STRENGTH_DEFAULT}"),
]  # fmt: skip
JobId = Annotated[str, Field(description="a job's id, as generate_image or edit_image answer it")]
Model = Annotated[
    str | None,
    Field(
        description="an offered model (list_models): its repo id, or its name part where that "
        "is unique; default: the service's default model"
    ),
]


def django_request(ctx: Context) -> HttpRequest:
    """The Django request this call came in on (core.asgi_bridge), authenticated by the
    route: whose jobs and images the call sees, and its origin for links."""
    request = ctx.request_context.request
    return request.scope["wsgi_environ"][REQUEST_KEY]  # type: ignore[union-attr]


WAIT_FALSE = " Here: call again with wait=false and follow the job with get_job."


async def _call(function: Callable[..., T], /, *args: Any, **kwargs: Any) -> T:
    """A service or selector call, in a worker thread (they block: the job board, the store,
    Redis); the refusals it raises become the tool's error, naming the field and the rule
    (and, for the synchronous bound, what an agent does instead)."""
    try:
        return await anyio.to_thread.run_sync(functools.partial(function, *args, **kwargs))
    except ServiceError as error:
        raise _tool_error(error) from None


def _tool_error(error: ServiceError) -> ToolError:
    if isinstance(error, SyncWaitersBusy):
        return ToolError(f"{error.message}: retry in {error.retry_after} s." + WAIT_FALSE)
    if isinstance(error, (PastSyncTimeout, SyncTimeout)):
        return ToolError(error.message + WAIT_FALSE)
    return ToolError(error.message)


def _job(view: JobView, request: HttpRequest) -> dict[str, Any]:
    """A job as GET /jobs/<id> answers it to this request."""
    return JobOut.from_orm(view, context={"request": request}).model_dump(mode="json")


def _job_answer(view: JobView, request: HttpRequest) -> CallToolResult:
    """A job not (or not yet) an image: its state, as JSON text and structured content."""
    job = _job(view, request)
    text = json.dumps(job, separators=(",", ":"))
    return CallToolResult(content=[TextContent(type="text", text=text)], structured_content=job)


def _image_answer(view: JobView, request: HttpRequest) -> CallToolResult:
    """A succeeded job: its PNG as image content, its signed link, and the job."""
    assert view.image is not None
    record = view.image
    link = signed_image_link(request, record.id)
    job = _job(view, request)
    parameters = record.parameters
    summary = (
        f"Image {record.id}: {parameters.width}x{parameters.height}, seed {parameters.seed}, "
        f"{parameters.steps} steps. Link (valid {settings.IMAGE_URL_TTL} s, no token needed): "
        f"{link}"
    )
    return CallToolResult(
        content=[
            ImageContent(type="image", data=png_base64(record), mime_type="image/png"),
            ResourceLink(
                type="resource_link", uri=link, name=f"{record.id}.png", mime_type="image/png"
            ),
            TextContent(type="text", text=summary),
        ],
        structured_content={"url": link, "job": job},
    )


def _progress(view: JobView) -> tuple[float, str]:
    """The job's progress (0 to 1) and its phase in words."""
    if view.state is JobState.QUEUED:
        return 0.0, f"queued, {view.position or 1} to run before it"
    if view.state is JobState.RUNNING and view.progress.steps:
        step = f"step {view.progress.step} of {view.progress.steps}"
        return view.progress.fraction, f"{view.phase}: {step}"
    return (1.0 if view.state in FINISHED else view.progress.fraction), view.phase


async def _follow(ctx: Context, job: JobView, deadline: float) -> None:
    """Reports the job's progress until it finishes or `deadline` (monotonic) passes: a
    notification whenever its progress grows (MCP's progress only grows), the first at once."""
    revision, reported = -1, -1.0
    while (left := deadline - time.monotonic()) > 0:
        view = await _call(
            selectors.job_wait, current_backend(), job_id=job.id, after=revision,
            timeout=min(left, settings.EVENT_STREAM_KEEPALIVE),
        )  # fmt: skip
        revision = view.revision
        fraction, message = _progress(view)
        if fraction > reported:
            await ctx.report_progress(fraction, 1.0, message)
            reported = fraction
        if view.state in FINISHED:
            return


async def _generated(
    ctx: Context, request: HttpRequest, prepare: Callable[[], GenerationRequest], wait: bool
) -> CallToolResult:
    """Admits this caller's key first (before an edit's pictures are read), then queues the
    generation `prepare` makes; with `wait`, holds a place among SYNC_WAITERS_MAX and follows
    the job to its image within GEN_SYNC_TIMEOUT (the job is cancelled then, as a synchronous
    request's is; it is cancelled too when the call is), else answers the queued job."""
    await _call(admit, request=request, count=1)
    owner = {"key_name": owner_key(request), "key_limit": queue_limit(request)}
    if not wait:
        generation = await _call(prepare)
        job = await _call(
            services.generation_submit, current_backend(), request=generation, **owner
        )
        return _job_answer(job, request)
    try:
        with places.sync_waiter_place():  # its refusal only: the rest are ToolErrors
            return await _waited(ctx, request, await _call(prepare), owner)
    except SyncWaitersBusy as error:
        raise _tool_error(error) from None


async def _waited(
    ctx: Context, request: HttpRequest, generation: GenerationRequest, owner: dict[str, Any]
) -> CallToolResult:
    """The waited generation's image, its progress reported on the way."""
    timeout = settings.GEN_SYNC_TIMEOUT
    deadline = time.monotonic() + timeout
    backend = current_backend()
    job = await _call(services.generation_submit_waited, backend, request=generation,
                      timeout=timeout, **owner)  # fmt: skip
    try:
        await _follow(ctx, job, deadline)
    except BaseException:  # the call was cancelled: nobody will collect the image
        with anyio.CancelScope(shield=True):
            await anyio.to_thread.run_sync(_cancel_quietly, job.id)
        raise
    left = max(0.0, deadline - time.monotonic())
    record = await _call(services.generation_waited_result, backend, request=generation,
                         job=job, timeout=left)  # fmt: skip
    view = await _call(selectors.job_get, backend, job_id=job.id)
    return await anyio.to_thread.run_sync(_image_answer, replace(view, image=record), request)


def _cancel_quietly(job_id: str) -> None:
    with contextlib.suppress(ServiceError):  # finished just now, or forgotten
        services.job_cancel(current_backend(), job_id=job_id)


async def generate_image(
    ctx: Context,
    prompt: Prompt,
    negative_prompt: NegativePrompt = None,
    size: Size = None,
    steps: Steps = None,
    guidance: Guidance = None,
    seed: Seed = None,
    model: Model = None,
    wait: Wait = True,
) -> CallToolResult:
    """Generates an image from a prompt with the model named, else the default one (CPU: a
    minute or more each). Answers the PNG and a link to it, or with wait=false the queued
    job."""
    request = django_request(ctx)
    generation = GenerationRequest(
        prompt=prompt, negative_prompt=negative_prompt or None, steps=steps, guidance=guidance,
        size=parse_size(size) if size else None, seed=seed, model=model,
    )  # fmt: skip
    return await _generated(
        ctx, request, lambda: services.with_model(current_backend(), generation), wait
    )


def _edit_source(request: HttpRequest, image: str | None, image_id: str | None) -> bytes:
    """The picture to edit: sent as base64, or a stored image of this caller's by its id."""
    if (image is None) == (image_id is None):
        raise FieldError("image", "send either image (base64) or image_id, not both or neither")
    if image is not None:
        return decode_base64(image, field="image")
    assert image_id is not None
    return selectors.image_png(
        current_backend(), image_id=image_id, seen_by=seen_by(request)
    ).read_bytes()


async def edit_image(
    ctx: Context,
    prompt: Prompt,
    image: Annotated[
        str | None, Field(description="the picture, base64 (PNG, JPEG or WebP)")
    ] = None,
    image_id: Annotated[
        str | None, Field(description="instead of image: a stored image's id (a generation's)")
    ] = None,
    mask: Annotated[
        str | None,
        Field(description="base64, the image's size: white repaints, black keeps, grey blends"),
    ] = None,
    strength: Strength = None,
    negative_prompt: NegativePrompt = None,
    size: Size = None,
    steps: Steps = None,
    guidance: Guidance = None,
    seed: Seed = None,
    model: Model = None,
    wait: Wait = True,
) -> CallToolResult:
    """Edits an image by a prompt: the whole picture (img2img), or with a mask only what it
    marks (inpainting). Answers the PNG and a link, or with wait=false the queued job."""
    request = django_request(ctx)

    def prepared() -> GenerationRequest:
        chosen = services.with_model(current_backend(), GenerationRequest(
            prompt=prompt, negative_prompt=negative_prompt or None, steps=steps,
            guidance=guidance, size=parse_size(size) if size else None, seed=seed, model=model,
        ))  # fmt: skip
        source = _edit_source(request, image, image_id)
        return services.edit_request(
            current_backend(), request=chosen,
            image=source, mask=None if mask is None else decode_base64(mask, field="mask"),
            strength=strength,
        )  # fmt: skip

    return await _generated(ctx, request, prepared, wait)


async def list_models(ctx: Context) -> CallToolResult:
    """Every offered model, the default first, with its state (ready, or not_started until
    POST /model/pull; a generation loads a pulled model itself), whether its weights are on
    the share and its preset (the steps and guidance a request that sends none gets). The
    default's entry carries its whole status too, as GET /model/status's top level."""
    backend = current_backend()
    status = await _call(selectors.model_status, backend)
    offered = await _call(selectors.offered_models, backend, status)
    top = status.model_dump(mode="json")
    answer = {"models": [{**(top if entry["default"] else {}), **entry} for entry in offered]}
    text = json.dumps(answer, separators=(",", ":"))
    return CallToolResult(content=[TextContent(type="text", text=text)], structured_content=answer)


async def get_job(ctx: Context, job_id: JobId) -> CallToolResult:
    """A job: its state and progress; once succeeded, its image and link."""
    request = django_request(ctx)
    view = await _call(
        selectors.job_get, current_backend(), job_id=job_id, seen_by=seen_by(request)
    )
    if view.state is JobState.SUCCEEDED and view.image is not None:
        return await anyio.to_thread.run_sync(_image_answer, view, request)
    return _job_answer(view, request)


async def cancel_job(ctx: Context, job_id: JobId) -> CallToolResult:
    """Cancels a job: a queued one never runs, a running one stops within seconds."""
    request = django_request(ctx)
    view = await _call(
        services.job_cancel, current_backend(), job_id=job_id, seen_by=seen_by(request)
    )
    return _job_answer(view, request)


def _annotations(title: str, *, read_only: bool, destructive: bool = False) -> ToolAnnotations:
    return ToolAnnotations(title=title, read_only_hint=read_only, destructive_hint=destructive,
                           open_world_hint=False)  # fmt: skip


def build_server() -> MCPServer:
    server: MCPServer = MCPServer(
        name="imagegen",
        version=app_version(),
        instructions="Text-to-image on a CPU: an image takes a minute or more. generate_image "
        "and edit_image wait for the image and report progress; with wait=false they answer "
        "the job at once, to follow with get_job. list_models names the models offered; "
        "`model` picks one.",
    )
    server.add_tool(generate_image, annotations=_annotations("Generate an image", read_only=False))
    server.add_tool(edit_image, annotations=_annotations("Edit an image", read_only=False))
    server.add_tool(list_models, annotations=_annotations("List the models", read_only=True))
    server.add_tool(get_job, annotations=_annotations("Get a job", read_only=True))
    server.add_tool(
        cancel_job, annotations=_annotations("Cancel a job", read_only=False, destructive=True)
    )
    return server


_made: AsgiBridge | BaseException | None = None
_making = threading.Lock()


def bridge(path: str) -> AsgiBridge:
    """This process's MCP server at `path`, started on first use (after gunicorn forked its worker),
    once: the first requests of a worker's threads wait for the one start, and a start that
    failed is that failure for every later request, not a new event loop thread each.
    Host and origin are Django's to check (ALLOWED_HOSTS), not the SDK's; bodies are bound
    by MAX_BODY_BYTES, which Django enforces before the SDK reads one."""
    global _made
    with _making:
        if _made is None:
            try:
                _made = AsgiBridge(build_server().streamable_http_app(
                    streamable_http_path=path,
                    stateless_http=True,
                    transport_security=TransportSecuritySettings(
                        enable_dns_rebinding_protection=False
                    ),
                    max_request_body_size=settings.DATA_UPLOAD_MAX_MEMORY_SIZE,
                ))  # fmt: skip
            except Exception as error:
                _made = error
    if isinstance(_made, BaseException):
        raise _made
    return _made
