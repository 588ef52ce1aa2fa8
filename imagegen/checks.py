"""The image settings that only imagegen's own rules can judge (the preview methods, the
scheduler names), checked when the app is ready and by `manage.py check`: a bad value stops
the start with a message naming the variable and the rule, as the settings' own checks do."""

from typing import Any

from django.conf import settings
from django.core import checks
from django.core.exceptions import ImproperlyConfigured

from imagegen.generation.catalog import parse_models
from imagegen.generation.previews import PREVIEW_METHODS, TINY
from imagegen.generation.schedulers import SCHEDULERS
from imagegen.model.loras import parse_loras
from imagegen.model.upscalers.offered import parse_upscalers


def setting_problems(values: Any = settings) -> list[str]:
    """What is wrong with `values` (the settings, or a settings module), each naming its
    variable; empty when nothing is."""
    problems = []
    if values.PREVIEW not in PREVIEW_METHODS:
        problems.append(f"PREVIEW must be approx, tiny or off, got {values.PREVIEW!r}")
    elif values.PREVIEW == TINY and not values.VAE_DECODER.tiny:
        problems.append("PREVIEW=tiny needs VAE_DECODER=tiny (the decoder it uses)")
    scheduler = values.GEN_DEFAULT_SCHEDULER
    if scheduler is not None and scheduler not in SCHEDULERS:
        problems.append(
            f"GEN_DEFAULT_SCHEDULER must be one of {', '.join(SCHEDULERS)}, got {scheduler!r}"
        )
    try:
        entries = parse_models(values.MODELS)
    except ValueError as exc:
        problems.append(str(exc))
    else:
        if any(entry.repo.lower() == values.MODEL_ID.lower() for entry in entries):
            problems.append(f"MODELS: {values.MODEL_ID!r} is MODEL_ID, offered already")
    try:
        parse_upscalers(values.UPSCALERS)
        parse_loras(values.LORAS)
    except ValueError as exc:
        problems.append(str(exc))
    return problems


@checks.register()
def check_settings(app_configs: Any, **kwargs: Any) -> list[checks.CheckMessage]:
    return [
        checks.Error(problem, id=f"imagegen.E{n:03d}")
        for n, problem in enumerate(setting_problems(), start=1)
    ]


def refuse_bad_settings(values: Any = settings) -> None:
    """Stops the start on the first problem: a web process runs no system checks itself."""
    problems = setting_problems(values)
    if problems:
        raise ImproperlyConfigured(problems[0])
