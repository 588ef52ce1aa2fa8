"""The page for people at /ui/. Its script calls the API like any client.

The HTML is served without the token. It holds only the form's bounds and defaults, also open
at GET /api. Everything private comes through the API, with the token."""

from django.conf import settings
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render

from apikeys.auth import protected
from core.version import app_version
from imagegen import selectors
from imagegen.api.schemas import PROMPT_MAX
from imagegen.backend import current_backend, is_distributed
from imagegen.generation.requests import (
    MASK_BLUR_DEFAULT,
    MASK_BLUR_MAX,
    SEED_MAX,
    STRENGTH_DEFAULT,
)
from imagegen.generation.schedulers import SCHEDULERS

# Everything the page loads is its own; images are blob: URLs of PNGs it fetched. No inline script,
# style or handler runs (the config is a JSON data block), so none is allowed. Set on the page
# alone: API answers are no documents.
CONTENT_SECURITY_POLICY = (
    "default-src 'self'; script-src 'self'; style-src 'self'; connect-src 'self'; "
    "img-src 'self' data: blob:; frame-ancestors 'none'"  # no other page may frame it
)


def _sizes(low: int, high: int) -> list[str]:
    """Square sizes to suggest, within the bounds."""
    sides = [low, 256, 512, 768, 1024, 1536, 2048, high]
    return [f"{side}x{side}" for side in sorted(set(sides)) if low <= side <= high]


def page(request: HttpRequest) -> HttpResponse:
    backend = current_backend()
    rules = selectors.generation_rules(backend)
    offered = backend.offered()
    allowed = rules["schedulers"] or list(SCHEDULERS)
    form = {
        "prompt_max": PROMPT_MAX,
        "steps_default": rules["steps"],
        "steps_max": settings.GEN_MAX_STEPS,
        "steps_cap": rules["max_steps"],
        "guidance_default": rules["guidance"],
        "guidance_max": settings.GEN_MAX_GUIDANCE,
        "guidance_cap": rules["max_guidance"],
        # Each by A1111's name, as the gallery's records name them (the values are the ids).
        "scheduler_default": rules["scheduler"] and SCHEDULERS[rules["scheduler"]].a1111_name,
        "schedulers": [(name, SCHEDULERS[name].a1111_name) for name in allowed],
        "preset": rules["preset"],
        "min_side": settings.GEN_MIN_SIDE,
        "max_side": settings.GEN_MAX_SIDE,
        "sizes": _sizes(settings.GEN_MIN_SIDE, settings.GEN_MAX_SIDE),
        "seed_max": SEED_MAX,
        "count_max": settings.GEN_MAX_N,
        "strength_default": STRENGTH_DEFAULT,
        "mask_blur_default": MASK_BLUR_DEFAULT,
        "mask_blur_max": MASK_BLUR_MAX,
        # The picker's choices, MODEL_ID's first: rendered here so that a choice kept in the
        # browser is restored before /model/status answers with their states and presets.
        "models": offered.ids,
        # A share only in distributed mode; on one machine MODEL_DIR is its own folder.
        "weights_label": "Weights on the share" if is_distributed() else "Weights downloaded",
    }
    config = {
        "tokenRequired": protected(),
        "galleryPage": 12,
        # The page's own bound (one POST /generate per image), so no API answer names it.
        "countMax": settings.GEN_MAX_N,
        "seedMax": SEED_MAX,
        # What Pull fetches, shown beforehand; /model/status's figure once known.
        "pullBytes": selectors.model_download_estimate(backend),
        # What a request naming no model runs: the model a queued job without `model` names.
        "defaultModel": offered.default.id,
        # The hints the chosen model's preset rewrites keep these bounds, the same for all.
        "stepsMax": settings.GEN_MAX_STEPS,
        "guidanceMax": settings.GEN_MAX_GUIDANCE,
        "minSide": settings.GEN_MIN_SIDE,
        "maxSide": settings.GEN_MAX_SIDE,
        "samplers": {name: scheduler.a1111_name for name, scheduler in SCHEDULERS.items()},
        # As the Model panel's label: a share only in distributed mode.
        "weightsWord": "on the share" if is_distributed() else "downloaded",
    }
    response = render(
        request, "ui/index.html", {"form": form, "config": config, "version": app_version()}
    )
    response["Content-Security-Policy"] = CONTENT_SECURITY_POLICY
    return response
