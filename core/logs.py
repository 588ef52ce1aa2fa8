"""Log filters: an answer the service gives on purpose is not an error of the service.

Django logs every 5xx answer at ERROR; a 503 (database down, model loading, queue full) or a
504 (no image in time) is the documented answer to a known condition, and an operator
scanning for ERROR lines should find only what needs them.
"""

import json
import logging
from datetime import UTC, datetime
from typing import Any

from core import request_context

EXPECTED_STATUSES = {503, 504}


class ExpectedAnswers(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return getattr(record, "status_code", None) not in EXPECTED_STATUSES


# The polls an app's page repeats every second or so (method, path, a part of the query),
# registered by the app when it is ready: their lines would bury every other request, so
# they are logged at debug only.
_QUIET_POLLS: set[tuple[str, str, str]] = set()


def register_quiet_poll(method: str, path: str, query_part: str) -> None:
    _QUIET_POLLS.add((method, path, query_part.lower()))


def is_quiet_poll(method: str, path: str, query: str) -> bool:
    """A registered page poll (register_quiet_poll)."""
    query = query.lower()
    return any(method == m and path == p and part in query for m, p, part in _QUIET_POLLS)


def first_part(error: BaseException) -> str:
    """pymongo appends its whole topology description to a timeout's message; the cause
    (which server, what failed) is what comes before it."""
    return str(error).split(", Topology Description:", 1)[0]


class JsonFormatter(logging.Formatter):
    """LOG_FORMAT=json: one JSON object per line, for a log search to query by field. Always
    time (UTC, ISO 8601), level, logger and message; request_id, route, status, duration,
    job_id and worker when known, from the record's `extra` or the context of the request or
    job it was logged in (core.request_context); an exception's traceback as `exception`."""

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
