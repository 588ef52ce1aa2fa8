"""The one timestamp form: UTC in milliseconds (`...15.728Z`).

MongoDB stores no finer, so a todo returned equals the todo read back."""

from datetime import UTC, datetime
from typing import overload


def utc_now() -> datetime:
    now = datetime.now(UTC)
    return now.replace(microsecond=now.microsecond // 1000 * 1000)


@overload
def iso_ms(moment: datetime) -> str: ...
@overload
def iso_ms(moment: None) -> None: ...
@overload
def iso_ms(moment: datetime | None) -> str | None: ...
def iso_ms(moment: datetime | None) -> str | None:
    """2026-11-22T07:46:15.728Z"""
    if moment is None:
        return None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    moment = moment.astimezone(UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}Z"
