"""Log filters: an answer the service gives on purpose is not an error of the service.

Django logs every 5xx answer at ERROR; a 503 (database down, model loading, queue full) or a
504 (no image in time) is the documented answer to a known condition, and an operator
scanning for ERROR lines should find only what needs them.
"""

import logging

EXPECTED_STATUSES = {503, 504}


class ExpectedAnswers(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return getattr(record, "status_code", None) not in EXPECTED_STATUSES


def first_part(error: BaseException) -> str:
    """pymongo appends its whole topology description to a timeout's message; the cause
    (which server, what failed) is what comes before it."""
    return str(error).split(", Topology Description:", 1)[0]
