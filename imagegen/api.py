"""The image service routes (filled in by the imagegen issue)."""

from django.http import HttpRequest
from ninja import Router

router = Router(tags=["imagegen"])


@router.get("/health", summary="Liveness: answers at once, touching neither model nor database")
def health(request: HttpRequest):
    return {"status": "healthy"}
