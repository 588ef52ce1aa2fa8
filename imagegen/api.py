"""The image service routes: parse the request, call the loader or the generator, answer."""

from django.http import HttpRequest, HttpResponse
from ninja import Form, Router
from ninja.errors import ValidationError

from config.auth import token_required
from config.version import app_version
from imagegen.device import compute_device
from imagegen.generation import get_generator
from imagegen.loader import get_loader
from imagegen.schemas import GenerateForm, Health, ImageErrorBody, ModelStatus

router = Router(tags=["imagegen"])

ROUTES = [
    ("GET", "/health", "liveness and device; answers at once, always"),
    ("GET", "/model/status", "this process's model state"),
    ("POST", "/model/pull", "download (if needed) and load the model in the background"),
    ("POST", "/generate", "text to PNG (form fields)"),
    ("GET", "/api", "this index"),
    ("GET", "/api/docs", "interactive API documentation"),
    ("GET", "/api/openapi.json", "OpenAPI schema"),
]


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


@router.post(
    "/generate",
    auth=token_required(),
    response={200: None, 400: ImageErrorBody, 409: ImageErrorBody, 503: ImageErrorBody},
    summary="Generate a PNG from a prompt",
)
def generate(request: HttpRequest, form: Form[GenerateForm]):
    if unknown := GenerateForm.unknown_fields(list(request.POST)):
        raise ValidationError(unknown)
    result = get_generator().generate(form.to_request())
    response = HttpResponse(result.png, content_type="image/png")
    response["X-Seed"] = str(result.seed)
    response["X-Steps"] = str(result.steps)
    response["X-Guidance"] = f"{result.guidance:g}"
    response["X-Size"] = f"{result.width}x{result.height}"
    response["X-Device"] = result.device
    response["X-Generation-Seconds"] = f"{result.seconds:.3f}"
    return response
