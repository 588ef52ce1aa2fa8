"""Typed readers for environment variables, so settings.py states each setting in one line."""

import math
import os
from typing import overload

from django.core.exceptions import ImproperlyConfigured

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off", ""}


def env_str(name: str, default: str) -> str:
    return os.environ.get(name, default)


def parse_bool(raw: str) -> bool | None:
    """The project's one reading of a yes/no string, any case; None for anything else."""
    value = raw.strip().lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    return None


def env_bool(name: str, default: bool) -> bool:
    raw = os.environ.get(name)
    if raw is None:
        return default
    value = parse_bool(raw)
    if value is None:
        raise ImproperlyConfigured(f"{name} must be a boolean (1/0, true/false), got {raw!r}")
    return value


@overload
def env_int(
    name: str, default: int, *, minimum: int | None = None, maximum: int | None = None
) -> int: ...
@overload
def env_int(
    name: str, default: None, *, minimum: int | None = None, maximum: int | None = None
) -> int | None: ...
def env_int(
    name: str, default: int | None, *, minimum: int | None = None, maximum: int | None = None
) -> int | None:
    """Unset or empty gives `default`; None makes the setting optional."""
    raw = os.environ.get(name)
    if raw is None or raw.strip() == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        raise ImproperlyConfigured(f"{name} must be an integer, got {raw!r}") from None
    if minimum is not None and value < minimum:
        raise ImproperlyConfigured(f"{name} must be at least {minimum}, got {value}")
    if maximum is not None and value > maximum:
        raise ImproperlyConfigured(f"{name} must be at most {maximum}, got {value}")
    return value


@overload
def env_float(name: str, default: float, *, minimum: float | None = None) -> float: ...
@overload
def env_float(name: str, default: None, *, minimum: float | None = None) -> float | None: ...
def env_float(name: str, default: float | None, *, minimum: float | None = None) -> float | None:
    """A finite number. Unset or empty gives `default`; None makes the setting optional."""
    raw = os.environ.get(name)
    if raw is None or raw.strip() == "":
        return default
    try:
        value = float(raw)
    except ValueError:
        raise ImproperlyConfigured(f"{name} must be a number, got {raw!r}") from None
    if not math.isfinite(value):
        raise ImproperlyConfigured(f"{name} must be a finite number, got {raw!r}")
    if minimum is not None and value < minimum:
        raise ImproperlyConfigured(f"{name} must be at least {minimum:g}, got {value:g}")
    return value


def env_list(name: str, default: list[str]) -> list[str]:
    raw = os.environ.get(name)
    if raw is None:
        return default
    return [item.strip() for item in raw.split(",") if item.strip()]
