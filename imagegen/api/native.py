"""The image service routes: parse the request, call the loader or the job queue, answer."""

import contextlib

from django.conf import settings
from django.http import FileResponse, HttpRequest, HttpResponse
from ninja import Form, Query, Router
from ninja.errors import ValidationError

from config.auth import token_required
from config.version import app_version
from imagegen.api.schemas import (
    GenerateForm,
    Health,
    ImageErrorBody,
    ImagePage,
    ImageRecordOut,
    JobOut,
    ModelStatus,
)
from imagegen.errors import (
    ImageNotFound,
    JobCancelled,
    JobFailed,
    JobFinished,
    JobNotFound,
    SyncTimeout,
)
from imagegen.generation.images import is_image_id
from imagegen.generation.jobs import Job, JobState, get_jobs
from imagegen.model.device import compute_device
from imagegen.model.loader import get_loader

router = Router(tags=["imagegen"])

ROUTES = [
    ("GET", "/health", "liveness and device; answers at once, always"),
    ("GET", "/model/status", "this process's model state"),
    ("POST", "/model/pull", "download (if needed) and load the model in the background"),
    ("POST", "/generate", "text to PNG (form fields); async=true for a job"),
    ("GET", "/jobs", "recent generation jobs"),
    ("GET", "/jobs/{id}", "one job: state, queue position, progress, result"),
    ("DELETE", "/jobs/{id}", "cancel that job (also POST /jobs/{id}/cancel)"),
    ("GET", "/images", "stored images, newest first"),
    ("GET", "/images/{id}", "one image's record"),
    ("GET", "/images/{id}.png", "one image"),
    ("GET", "/api", "this index"),
    ("GET", "/api/docs", "interactive API documentation"),
    ("GET", "/api/openapi.json", "OpenAPI schema"),
]
ERRORS = {400: ImageErrorBody, 401: ImageErrorBody, 404: ImageErrorBody, 409: ImageErrorBody}
TRUE = {"1", "true", "yes", "on"}


@router.get("/health", response=Health, summary="Liveness; touches neither model nor database")
def health(request: HttpRequest):
    return {"status": "healthy", "device": compute_device(), "version": app_version()}


@router.get("/api", summary="Service index")
def index(request: HttpRequest):
    return {
        "service": "imagegen",
        "version": app_version(),
        "docs": "/api/docs",
        "openapi": "/api/openapi.json",
        "routes": [{"method": m, "path": p, "description": d} for m, p, d in ROUTES],
    }


@router.get("/model/status", response=ModelStatus, summary="Model state of this process")
def model_status(request: HttpRequest):
    return get_loader().status()


@router.post(
    "/model/pull",
    auth=token_required(),
    response={200: ModelStatus, 202: ModelStatus},
    summary="Download (cold) or skip (warm) and load the model, in the background",
)
def model_pull(request: HttpRequest):
    loader = get_loader()
    started = loader.pull()
    return (202 if started else 200), loader.status()


def wants_async(request: HttpRequest) -> bool:
    """`async=true` as a form field or query parameter, or `Prefer: respond-async`."""
    flag = request.POST.get("async") or request.GET.get("async") or ""
    return flag.strip().lower() in TRUE or "respond-async" in request.headers.get("Prefer", "")


def job_answer(job: Job) -> dict:
    return get_jobs().snapshot(job)


@router.post(
    "/generate",
    auth=token_required(),
    response={200: None, 202: JobOut, 503: ImageErrorBody, **ERRORS},
    summary="Generate a PNG from a prompt (or, with async=true, start a job)",
)
def generate(request: HttpRequest, response: HttpResponse, form: Form[GenerateForm]):
    if unknown := GenerateForm.unknown_fields([k for k in request.POST if k != "async"]):
        raise ValidationError(unknown)
    jobs = get_jobs()
    job = jobs.submit(form.to_request())
    if wants_async(request):
        response["Location"] = f"/jobs/{job.id}"  # Ninja copies these headers to the answer
        return 202, job_answer(job)
    if not job.done.wait(settings.GEN_SYNC_TIMEOUT):
        with contextlib.suppress(JobFinished):  # it may have finished just now
            jobs.cancel(job.id)
        if not job.done.is_set() or job.state is JobState.CANCELLED:
            raise SyncTimeout(job.id)
    if job.state is JobState.CANCELLED:
        raise JobCancelled()
    if job.state is JobState.FAILED:
        raise job.failure or JobFailed(job.error)
    record = job.image
    png = HttpResponse(jobs.store.png_path(record.id).read_bytes(), content_type="image/png")
    parameters = record.parameters
    png["X-Seed"] = str(parameters.seed)
    png["X-Steps"] = str(parameters.steps)
    png["X-Guidance"] = f"{parameters.guidance:g}"
    png["X-Size"] = f"{parameters.width}x{parameters.height}"
    png["X-Device"] = record.device
    png["X-Generation-Seconds"] = f"{record.timings['generation_seconds']:.3f}"
    png["X-Image-Id"] = record.id
    png["X-Job-Id"] = job.id
    return png


@router.get("/jobs", auth=token_required(), response={200: list[JobOut], **ERRORS})
def job_list(request: HttpRequest, limit: int = Query(20, ge=1, le=200)):
    return [job_answer(job) for job in get_jobs().recent(limit)]


@router.get("/jobs/{job_id}", auth=token_required(), response={200: JobOut, **ERRORS})
def job_get(request: HttpRequest, job_id: str):
    job = get_jobs().get(job_id)
    if job is None:
        raise JobNotFound()
    return job_answer(job)


@router.delete("/jobs/{job_id}", auth=token_required(), response={200: JobOut, **ERRORS})
def job_cancel(request: HttpRequest, job_id: str):
    job = get_jobs().cancel(job_id)
    if job is None:
        raise JobNotFound()
    return job_answer(job)


@router.post("/jobs/{job_id}/cancel", auth=token_required(), response={200: JobOut, **ERRORS})
def job_cancel_post(request: HttpRequest, job_id: str):
    return job_cancel(request, job_id)


@router.get("/images", auth=token_required(), response={200: ImagePage, **ERRORS})
def image_list(
    request: HttpRequest,
    limit: int = Query(20, ge=1, le=100),
    before: str | None = Query(None, description="the last id of the previous page"),
):
    records = get_jobs().store.page(limit=limit, before=before)
    more = len(records) == limit
    return {
        "items": [record.to_dict() for record in records],
        "next": f"/images?limit={limit}&before={records[-1].id}" if more else None,
    }


@router.get("/images/{image_id}.png", auth=token_required(), response={200: None, **ERRORS})
def image_png(request: HttpRequest, image_id: str):
    path = get_jobs().store.png_path(image_id)
    if not is_image_id(image_id) or not path.is_file():
        raise ImageNotFound()
    return FileResponse(path.open("rb"), content_type="image/png")


@router.get("/images/{image_id}", auth=token_required(), response={200: ImageRecordOut, **ERRORS})
def image_get(request: HttpRequest, image_id: str):
    record = get_jobs().store.get(image_id)
    if record is None:
        raise ImageNotFound()
    return record.to_dict()
