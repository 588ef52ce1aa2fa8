"""The image service's own routes: parse the request, call one service or selector, answer."""

from typing import Annotated

from django.conf import settings
from django.http import FileResponse, HttpRequest, HttpResponse, StreamingHttpResponse
from django.urls import reverse
from ninja import Header, Query, Router
from ninja.errors import ValidationError

from apikeys.auth import (
    ADMIN,
    client_identity,
    open_warning,
    owner_key,
    public_origin,
    queue_limit,
    request_caller,
    seen_by,
    stream_key,
    token_required,
)
from core.env import parse_bool
from core.errors import FieldError
from core.openapi import form_request_body, png_answer
from core.version import app_version
from imagegen import selectors, services
from imagegen.api import generate_body, places
from imagegen.api.generate_body import FormOrJson
from imagegen.api.protocol import admit
from imagegen.api.schemas import (
    ApiIndex,
    EstimateForm,
    EstimateOut,
    EstimateQuery,
    GenerateForm,
    GenerationInForce,
    Health,
    ImageOut,
    ImagePage,
    JobOut,
    JobPage,
    ModelStatusOut,
    RouteEntry,
    errors,
)
from imagegen.api.upscale_form import (
    IMAGE_PART,
    UpscaleForm,
    check_sent_names,
    sent_image,
    upscale_png,
)
from imagegen.backend import current_backend
from imagegen.errors import JobNotFound, PreviewNotYet
from imagegen.generation import events
from imagegen.generation.images import ImageRecord
from imagegen.generation.job_board import JobView
from imagegen.generation.parameters import steps_running
from imagegen.generation.prompt_tags import LoraTag
from imagegen.generation.requests import (
    GenerationRequest,
)
from imagegen.model.device import compute_device

router = Router(tags=["imagegen"])


@router.get("/health", response=Health, summary="Liveness; touches neither model nor database")
def health(request: HttpRequest):
    return {"status": "healthy", "device": compute_device(), "version": app_version()}


def route_entries(docs: str, openapi: str) -> list[RouteEntry]:
    """This router's routes as declared (their summaries), so the index cannot drift from
    them, and the API's documentation routes."""
    entries = [
        RouteEntry(method=method, path=path, description=operation.summary or "")
        for path, view in router.path_operations.items()
        for operation in view.operations
        if operation.include_in_schema
        for method in operation.methods
    ]
    return [
        *entries,
        RouteEntry(method="GET", path=docs, description="interactive API documentation"),
        RouteEntry(method="GET", path=openapi, description="OpenAPI schema"),
    ]


@router.get("/api", response=ApiIndex, summary="This index: the routes and generation rules")
def index(request: HttpRequest):
    # The documentation routes of the API that serves this one (config.api).
    namespace = request.resolver_match.namespace if request.resolver_match else ""
    docs, openapi = reverse(f"{namespace}:openapi-view"), reverse(f"{namespace}:openapi-json")
    return ApiIndex(
        service="imagegen",
        version=app_version(),
        docs=docs,
        openapi=openapi,
        routes=route_entries(docs, openapi),
        generation=GenerationInForce.model_validate(selectors.generation_rules(current_backend())),
        open=open_warning() is not None,
        warning=open_warning(),
    )


def status_answer() -> ModelStatusOut:
    """The model's status with the generation rules in force beside it."""
    backend = current_backend()
    status = selectors.model_status(backend)
    return ModelStatusOut.model_validate(
        {
            **status.model_dump(),
            "generation": selectors.generation_rules(backend),
            "models": selectors.offered_models(backend, status),
        }
    )


@router.get("/model/status", response=ModelStatusOut, summary="Model state of this process")
def model_status(request: HttpRequest):
    return status_answer()


@router.post(
    "/model/pull",
    auth=token_required(ADMIN),
    response={200: ModelStatusOut, 202: ModelStatusOut, **errors(400, 501, 503)},
    summary="Download (cold) or skip (warm) and load the model, in the background",
    openapi_extra={
        "parameters": [
            {
                "name": "model",
                "in": "query",
                "required": False,
                "schema": {"type": "string"},
                "description": "an offered model (repo id or unique name part; also a form "
                "or JSON field); none: MODEL_ID",
            }
        ]
    },
)
def model_pull(request: HttpRequest):
    """Pulls and loads MODEL_ID, or the offered model that `model` (a query parameter, a form
    field or a JSON field) names."""
    model = generate_body.sent_text(request, "model")
    started = services.model_pull(current_backend(), model=model)
    return (202 if started else 200), status_answer()


NOT_A_BOOLEAN = "must be a boolean: true or false (1/0, yes/no, on/off); got {!r}"


def wants_async(request: HttpRequest) -> bool:
    """`async=true` as a form field, a JSON field or a query parameter, or `Prefer:
    respond-async`; a value that is not a boolean is refused, as the schema's boolean fields
    are, rather than read as no."""
    flag = generate_body.sent_flag(request)
    if flag is None:
        flag = request.GET.get("async") or ""
    value = flag if isinstance(flag, bool) else parse_bool(flag)
    if value is None:
        raise FieldError("async", NOT_A_BOOLEAN.format(flag))
    return value or "respond-async" in request.headers.get("Prefer", "")


def png_with_headers(record: ImageRecord, job: JobView) -> HttpResponse:
    """The PNG with its parameters in headers, so a client of the synchronous form needs
    no second request to learn the seed it got, nor what the service applied: X-Steps,
    X-Guidance and X-Scheduler are what ran (an edit's X-Steps: the steps its strength ran,
    with X-Strength, and X-Inpaint-Model when the inpainting checkpoint's UNet ran) (the
    scheduler by A1111's name, as the record says), X-Adjusted names what was changed from
    what the client sent (`steps 20->4, guidance 7->1`), X-Preset the preset whose defaults
    ran."""
    png = HttpResponse(
        selectors.image_png(current_backend(), image_id=record.id).read_bytes(),
        content_type="image/png",
    )
    parameters = record.parameters
    png["X-Seed"] = str(parameters.seed)
    png["X-Steps"] = str(steps_running(parameters))  # an edit's: those its strength ran
    png["X-Guidance"] = f"{parameters.guidance:g}"
    if parameters.edit is not None:
        png["X-Strength"] = f"{parameters.edit.strength:g}"
        if parameters.edit.inpaint_model is not None:  # INPAINT_MODEL_ID's UNet ran
            png["X-Inpaint-Model"] = parameters.edit.inpaint_model.model_id
    png["X-Scheduler"] = parameters.scheduler
    if adjusted := job.parameters.answered().adjusted:
        png["X-Adjusted"] = ", ".join(change.header() for change in adjusted)
    if job.parameters.preset is not None:  # the model's, or a prompt's few-step LoRA's
        png["X-Preset"] = job.parameters.preset
    png["X-Size"] = f"{parameters.width}x{parameters.height}"
    if parameters.hires is not None:  # X-Size is its first pass's, as the record's
        png["X-Hires-Size"] = "x".join(map(str, parameters.hires.size))
    png["X-Device"] = record.device
    png["X-Model"] = parameters.model_id
    png["X-Generation-Seconds"] = f"{record.timings['generation_seconds']:.3f}"
    png["X-Image-Id"] = record.id
    png["X-Job-Id"] = job.id
    return png


ASYNC_FIELD = {
    "type": "boolean",
    "description": "answer 202 with the job at once instead of waiting for the PNG",
}


EDIT_PARTS = {
    "image": "start from this image (img2img; with `mask`, inpainting): PNG, JPEG or WebP",
    "mask": "the image's size; white repaints, black keeps, grey blends",
}


def generate_request_body(
    schema: type[GenerateForm] = GenerateForm, parts: dict[str, str] = EDIT_PARTS
) -> dict:
    """The form's two encodings and the same fields as a JSON object, the images base64
    (`parts`: none for an estimate, which reads no image and queues nothing)."""
    flags = {"async": ASYNC_FIELD} if parts else {}
    body = form_request_body(schema, parts, **flags)
    form = body["content"]["multipart/form-data"]["schema"]
    images = {
        name: {"type": "string", "description": f"base64 (a `data:` prefix allowed); {text}"}
        for name, text in parts.items()
    }
    loras = {
        "type": "array",
        "description": "the LoRAs to run, as repeated `lora` form fields are; weight 1 when absent",
        "items": {
            "type": "object",
            "properties": {
                "name": {"type": "string", "minLength": 1, "maxLength": 200, "pattern": r"\S"},
                "weight": {"type": "number", "minimum": -4, "maximum": 4},
            },
            "required": ["name"],
            "additionalProperties": False,
        },
    }
    body["content"][generate_body.JSON_TYPE] = {
        "schema": {**form, "properties": {**form["properties"], **images, "loras": loras}}
    }
    return body


@router.post(
    "/generate",
    auth=token_required(),
    response={200: None, 202: JobOut, **errors(400, 409, 413, 429, 500, 503, 504)},
    summary="Generate a PNG from a prompt (or, with async=true, start a job)",
    openapi_extra={
        "requestBody": generate_request_body(),
        **png_answer("the PNG; its parameters in X-Seed, X-Steps, ... headers"),
    },
)  # fmt: skip
def generate(
    request: HttpRequest, response: HttpResponse, form: Annotated[GenerateForm, FormOrJson(...)]
):
    if unknown := GenerateForm.unknown_fields(*generate_body.sent_names(request)):
        raise ValidationError(unknown)
    run_async = wants_async(request)  # refused before an edit's inputs are stored
    admit(request, 1)  # before an edit's images are decoded: a key past its limits costs nothing
    webhook = services.webhook_plan(
        url=form.webhook_url, caller=request_caller(request), origin=link_origin(request),
        asynchronous=run_async,
    )  # fmt: skip
    generation = generation_request(request, form)
    key = request.headers.get("Idempotency-Key")  # a retry joins its first attempt's job
    if run_async:
        if key is None:
            job = services.generation_submit(
                current_backend(),
                request=generation,
                key_name=owner_key(request),
                key_limit=queue_limit(request),
            )
        else:
            job = services.generation_submit_keyed(
                current_backend(), request=generation, client=client_identity(request),
                idempotency_key=key, key_name=owner_key(request),
                key_limit=queue_limit(request),
            )  # fmt: skip
        if webhook is not None:
            services.webhook_watch(current_backend(), job_id=job.id, plan=webhook)
        response["Location"] = f"/jobs/{job.id}"  # Ninja copies these headers to the answer
        return 202, selectors.job_get(current_backend(), job_id=job.id)
    backend = current_backend()
    with places.sync_waiter_place(backend, generation):
        job, record = services.generation_run(
            backend, request=generation, timeout=settings.GEN_SYNC_TIMEOUT,
            client=client_identity(request), idempotency_key=key, key_name=owner_key(request),
            key_limit=queue_limit(request),
        )  # fmt: skip
    return png_with_headers(record, job)


def link_origin(request: HttpRequest) -> str:
    """The origin of the links a webhook carries: PUBLIC_URL, else the one this request
    reached (its forwarded one behind TRUSTED_PROXIES)."""
    return settings.PUBLIC_URL or public_origin(request)


def generation_request(request: HttpRequest, form: GenerateForm) -> GenerationRequest:
    """The form's generation; with an `image` (and a `mask`), an edit of it."""
    image, mask = generate_body.edit_inputs(request)
    form.check_edit_fields(editing=image is not None, masking=mask is not None)
    loras = [*form.lora_fields(), *generate_body.json_loras(request)]
    chosen = resolved_request(form, form.to_request(), loras=loras)
    if image is None:
        return chosen
    return services.edit_request(
        current_backend(), request=chosen, image=image, mask=mask,
        strength=form.strength, mask_blur=form.mask_blur, resize_mode=form.resize_mode,
        only_masked=bool(form.only_masked), only_masked_padding=form.only_masked_padding,
    )  # fmt: skip


def resolved_request(
    form: GenerateForm, asked: GenerationRequest, *, loras: list[LoraTag]
) -> GenerationRequest:
    """`asked` (the form's request) with its model, LoRAs (the prompt's tags, then `loras`)
    and hires fix resolved and checked: what POST /generate queues and GET /generate/estimate
    estimates, so that both count the same work (a LoRA's recipe, both passes)."""
    chosen = services.with_model(current_backend(), asked, loras=loras)
    if (hires := form.hires_asked()) is not None:
        chosen = services.with_hires(
            current_backend(), chosen, asked=hires, fields=services.NATIVE_FIELDS
        )
    return chosen


@router.get(
    "/generate/estimate",
    auth=token_required(),
    response={200: EstimateOut, **errors(400, 409, 503)},
    summary="How long a generation would take now, and whether a synchronous one is refused",
)
def generate_estimate(request: HttpRequest, query: Query[EstimateQuery]):
    estimated = resolved_request(query, query.to_request(), loras=query.lora_fields())
    return estimate_answer(estimated, count=query.n or 1)


ESTIMATE_READS_NO_IMAGE = "an estimate reads no image: send `image_size` (WIDTHxHEIGHT) instead"


@router.post(
    "/generate/estimate",
    auth=token_required(),
    response={200: EstimateOut, **errors(400, 409, 413, 503)},
    summary="The same for a body as POST /generate takes it (form or JSON: a `hires` object, "
    "`loras`); `async` is ignored, an image refused",
    openapi_extra={"requestBody": generate_request_body(EstimateForm, {})},
)
def generate_estimate_of_body(request: HttpRequest, form: Annotated[EstimateForm, FormOrJson(...)]):
    names, files = generate_body.sent_names(request)
    unknown = EstimateForm.unknown_fields(names, []) + [
        {"loc": ("form", name), "msg": ESTIMATE_READS_NO_IMAGE, "type": "extra"} for name in files
    ]
    if unknown:
        raise ValidationError(unknown)
    loras = [*form.lora_fields(), *generate_body.json_loras(request)]
    estimated = resolved_request(form, form.to_request(), loras=loras)
    return estimate_answer(estimated, count=form.n or 1)


def estimate_answer(estimated: GenerationRequest, *, count: int) -> EstimateOut:
    verdict = selectors.generation_estimate(
        current_backend(), request=estimated, count=count, timeout=settings.GEN_SYNC_TIMEOUT
    )
    return EstimateOut.of(verdict)


JOB_ID_PATTERN = "^[0-9a-f]{16}$"


@router.get(
    "/jobs",
    auth=token_required(),
    response={200: list[JobOut] | JobPage, **errors(400)},
    summary="Recent generation jobs, newest first",
)
def job_list(
    request: HttpRequest,
    limit: int = Query(20, ge=1, le=200),
    unfinished: bool = Query(
        False, description="only the jobs queued or running (every one, however old)"
    ),
    paged: bool = Query(
        False, description="answer {items, next} as GET /images does, instead of a bare list"
    ),
    before: str | None = Query(
        None,
        pattern=JOB_ID_PATTERN,
        description="the last id of the previous page (answers {items, next}); after a job "
        "no longer remembered (JOBS_KEEP), the page is empty",
    ),
):
    scope = seen_by(request)
    if paged or before is not None:  # the bare list stays for the clients that read it
        return selectors.job_page(
            current_backend(), limit=limit, before=before, unfinished=unfinished, seen_by=scope
        )
    return selectors.job_list(current_backend(), limit=limit, unfinished=unfinished, seen_by=scope)


@router.get(
    "/jobs/{job_id}",
    auth=token_required(),
    response={200: JobOut, **errors(404)},
    summary="One job: state, queue position, progress, result",
)
def job_get(request: HttpRequest, job_id: str):
    return selectors.job_get(current_backend(), job_id=job_id, seen_by=seen_by(request))


EVENT_STREAM_DOC = {
    "responses": {
        200: {
            "description": (
                "text/event-stream: `queued`, `running`, `succeeded`, `failed` and `cancelled` "
                "events carry the job (as GET /jobs/{job_id}), `step` events "
                "{step, steps, fraction, eta_seconds}, `preview` events (no id, never replayed) "
                "{step, steps, width, height, image: a data: URL} after the steps they follow; "
                "the stream ends after the final state "
                "or after EVENT_STREAM_SECONDS (resume with Last-Event-ID)"
            ),
            "content": {"text/event-stream": {"schema": {"type": "string"}}},
        }
    }
}


def job_json(view: JobView, request: HttpRequest) -> dict:
    """A job as GET /jobs/<id> answers it to this request, for the events that carry the
    whole job."""
    return JobOut.from_orm(view, context={"request": request}).model_dump(mode="json")


@router.get(
    "/jobs/{job_id}/events",
    auth=token_required(),
    response={200: None, **errors(400, 404, 503)},
    summary="The job's progress, pushed: Server-Sent Events until its final state",
    openapi_extra=EVENT_STREAM_DOC,
)
def job_events(
    request: HttpRequest,
    job_id: str,
    # A plain string (empty: a new stream), so the document offers no null to send.
    last_event_id: str = Header(
        "", alias="Last-Event-ID", pattern=events.EVENT_ID_PATTERN,
        description="the id of the last event received: the stream resumes after it",
    ),
):  # fmt: skip
    scope = seen_by(request)
    # 404 before a place is taken
    selectors.job_get(current_backend(), job_id=job_id, seen_by=scope)
    seen = events.Seen.from_event_id(last_event_id) if last_event_id else None
    headers = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
    if request.META.get("REQUEST_METHOD") == "HEAD":  # the headers only; no place held
        return StreamingHttpResponse([], content_type="text/event-stream", headers=headers)
    give_back = places.event_stream_place(stream_key(request))

    def wait(after: int, timeout: float) -> JobView | None:
        try:
            return selectors.job_wait(
                current_backend(), job_id=job_id, after=after, timeout=timeout, seen_by=scope
            )
        except JobNotFound:
            return None

    chunks = events.job_event_stream(
        wait=wait, seen=seen, describe=lambda view: job_json(view, request),
        life=settings.EVENT_STREAM_SECONDS,
        keepalive=settings.EVENT_STREAM_KEEPALIVE,
        preview=lambda: selectors.job_preview(current_backend(), job_id=job_id),
    )  # fmt: skip
    body = events.ClosingStream(chunks, give_back)
    return StreamingHttpResponse(body, content_type="text/event-stream", headers=headers)


@router.get(
    "/jobs/{job_id}/preview",
    auth=token_required(),
    response={200: None, **errors(404)},
    summary="The running job's latest preview (a small JPEG); 404 before the first",
    openapi_extra={"responses": {200: {"description": "image/jpeg: the latest preview, with "
                   "X-Preview-Step", "content": {"image/jpeg": {"schema": {"type": "string",
                   "format": "binary"}}}}}},
)  # fmt: skip
def job_preview(request: HttpRequest, job_id: str):
    selectors.job_get(
        current_backend(), job_id=job_id, seen_by=seen_by(request)
    )  # unknown, or another key's
    found = selectors.job_preview(current_backend(), job_id=job_id)
    if found is None:
        raise PreviewNotYet()
    response = HttpResponse(found.data, content_type=found.media_type)
    response["X-Preview-Step"] = str(found.step)
    response["Cache-Control"] = "no-store"
    return response


@router.delete(
    "/jobs/{job_id}",
    auth=token_required(),
    response={200: JobOut, **errors(404, 409)},
    summary="Cancel a job: a queued one never runs, a running one stops at the next block",
)
def job_cancel(request: HttpRequest, job_id: str):
    return services.job_cancel(current_backend(), job_id=job_id, seen_by=seen_by(request))


@router.post(
    "/jobs/{job_id}/cancel",
    auth=token_required(),
    response={200: JobOut, **errors(404, 409)},
    summary="Cancel a job (as DELETE /jobs/{job_id}, for clients that cannot send DELETE)",
)
def job_cancel_post(request: HttpRequest, job_id: str):
    return services.job_cancel(current_backend(), job_id=job_id, seen_by=seen_by(request))


@router.get(
    "/images",
    auth=token_required(),
    response={200: ImagePage, **errors(400)},
    summary="Stored images, newest first",
)
def image_list(
    request: HttpRequest,
    limit: int = Query(20, ge=1, le=100),
    before: str | None = Query(None, description="the last id of the previous page"),
):
    return selectors.image_page(
        current_backend(), limit=limit, before=before, seen_by=seen_by(request)
    )


@router.get(
    "/images/inputs/{digest}",
    auth=token_required(),
    response={200: None, **errors(404)},
    summary="An edit's input (its image or mask, as sent), by the sha256 its record names",
    openapi_extra={
        "responses": {
            200: {
                "description": "the file as sent, with its image media type",
                "content": {"image/*": {"schema": {"type": "string", "format": "binary"}}},
            }
        }
    },
)
def image_input(request: HttpRequest, digest: str):
    path, media_type = selectors.image_input(
        current_backend(), digest=digest, seen_by=seen_by(request)
    )
    return FileResponse(path.open("rb"), content_type=media_type)


@router.get(
    "/images/{image_id}.png",
    auth=token_required(),
    response={200: None, **errors(404)},
    summary="One stored image, as PNG",
    openapi_extra=png_answer("the PNG"),
)
def image_png(request: HttpRequest, image_id: str):
    path = selectors.image_png(current_backend(), image_id=image_id, seen_by=seen_by(request))
    return FileResponse(path.open("rb"), content_type="image/png")


@router.get(
    "/images/{image_id}",
    auth=token_required(),
    response={200: ImageOut, **errors(404)},
    summary="One stored image's record: its parameters and timings",
)
def image_get(request: HttpRequest, image_id: str):
    return selectors.image_get(current_backend(), image_id=image_id, seen_by=seen_by(request))


@router.delete(
    "/images/{image_id}",
    auth=token_required(),
    response={200: ImageOut, **errors(404)},
    summary="Delete one stored image (its PNG and its record); answers the record removed",
)
def image_delete(request: HttpRequest, image_id: str):
    return services.image_delete(current_backend(), image_id=image_id, seen_by=seen_by(request))


@router.post(
    "/upscale",
    auth=token_required(),
    response={200: None, 202: JobOut, **errors(400, 404, 409, 413, 429, 500, 503, 504)},
    summary="Upscale an image (an upload or a stored one) as a job: the PNG, or with async=true "
    "the job",
    openapi_extra={
        "requestBody": form_request_body(UpscaleForm, IMAGE_PART, **{"async": ASYNC_FIELD}),
        **png_answer("the PNG; what ran in X-Upscaler, X-Scale, X-Size ... headers"),
    },
)  # fmt: skip
def upscale(
    request: HttpRequest, response: HttpResponse, form: Annotated[UpscaleForm, FormOrJson(...)]
):
    check_sent_names(request)
    run_async = wants_async(request)
    admit(request, 1)  # before the image is decoded: a key past its limits costs nothing
    backend = current_backend()
    job_request = services.upscale_request(
        backend, image=sent_image(request), image_id=form.image_id, seen_by=seen_by(request),
        upscaler=form.upscaler, scale=form.scale, width=form.width, height=form.height,
    )  # fmt: skip
    key = request.headers.get("Idempotency-Key")  # a retry joins its first attempt's job
    if run_async:
        if key is None:
            job = services.generation_submit(
                backend, request=job_request, key_name=owner_key(request),
                key_limit=queue_limit(request),
            )  # fmt: skip
        else:
            job = services.generation_submit_keyed(
                backend, request=job_request, client=client_identity(request),
                idempotency_key=key, key_name=owner_key(request),
                key_limit=queue_limit(request),
            )  # fmt: skip
        response["Location"] = f"/jobs/{job.id}"
        return 202, selectors.job_get(backend, job_id=job.id)
    with places.sync_waiter_place(backend, job_request):
        job, record = services.generation_run(
            backend, request=job_request, timeout=settings.GEN_SYNC_TIMEOUT,
            client=client_identity(request), idempotency_key=key, key_name=owner_key(request),
            key_limit=queue_limit(request),
        )  # fmt: skip
    return upscale_png(record, job)
