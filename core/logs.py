"""Log filters: an answer given on purpose is not an error of the service.

A 503 or 504 is a documented answer. An operator scanning for ERROR should find only real
errors."""

import json
import logging
from datetime import UTC, datetime
from typing import Any

from core import request_context

EXPECTED_STATUSES = {503, 504}


class ExpectedAnswers(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return getattr(record, "status_code", None) not in EXPECTED_STATUSES


# Polls a page repeats every second, registered by their app. Their lines would bury every other
# request, so they log at debug.
_QUIET_POLLS: set[tuple[str, str, str]] = set()


def register_quiet_poll(method: str, path: str, query_part: str) -> None:
    _QUIET_POLLS.add((method, path, query_part.lower()))


def is_quiet_poll(method: str, path: str, query: str) -> bool:
    """A registered page poll (register_quiet_poll)."""
    query = query.lower()
    return any(method == m and path == p and part in query for m, p, part in _QUIET_POLLS)


def first_part(error: BaseException) -> str:
    """pymongo appends its whole topology to a timeout's message; the cause comes before it."""
    return str(error).split(", Topology Description:", 1)[0]


class JsonFormatter(logging.Formatter):
    """LOG_FORMAT=json: one JSON object per line, for a log search to query by field."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        context = {
            "request_id": request_context.request_id.get(),
            "route": request_context.route.get(),
            "job_id": request_context.job_id.get(),
            "worker": request_context.worker.get(),
        }
        for field in ("request_id", "route", "status", "duration", "job_id", "worker"):
            value = getattr(record, field, None)
            if value is None:
                value = context.get(field)
            if value is not None:
                entry[field] = value
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return json.dumps(entry, default=str)
