"""X-Request-ID and LOG_FORMAT=json in process: which ids are kept, that every answer echoes
one, and what a JSON log line holds (core.request_context, core.logs.JsonFormatter)."""

import json
import logging

import pytest
from django.test import Client

from core import request_context
from core.logs import JsonFormatter


@pytest.mark.parametrize(
    "sent", ["a", "abc-DEF_1.2", "x" * 128, "0af7651916cd43dd8448eb211c80319c"]
)
def test_a_valid_id_is_kept_and_echoed(sent):
    assert Client().get("/health", HTTP_X_REQUEST_ID=sent)["X-Request-ID"] == sent


@pytest.mark.parametrize("sent", ["", "x" * 129, "has space", "new\nline", "é", "a/b", "a;b"])
def test_an_invalid_id_is_replaced_by_a_new_one(sent):
    echoed = Client().get("/health", HTTP_X_REQUEST_ID=sent)["X-Request-ID"]
    assert echoed != sent and len(echoed) == 32 and int(echoed, 16) >= 0


def test_every_answer_carries_an_id_errors_included():
    client = Client()
    first = client.get("/no/such/route")
    second = client.get("/no/such/route")
    assert first.status_code == 404 and first["X-Request-ID"]
    assert first["X-Request-ID"] != second["X-Request-ID"]  # one each, when none is sent
    assert client.post("/generate", {})["X-Request-ID"]  # a 400 or 409, with its id


def record(message: str, **extra: object) -> logging.LogRecord:
    made = logging.LogRecord("imagegen.test", logging.WARNING, __file__, 1, message, (), None)
    for name, value in extra.items():
        setattr(made, name, value)
    return made


def test_a_json_line_carries_the_request_and_the_job_it_was_logged_in():
    formatter = JsonFormatter()
    with request_context.request_scope(rid="req-1", path="/generate"):
        request_context.route.set("/generate")
        line = json.loads(formatter.format(record("queued %s", status=202, duration=0.5)))
        with request_context.job_scope(job="job-9", rid="req-1", name="w3"):
            in_job = json.loads(formatter.format(record("running")))
    outside = json.loads(formatter.format(record("idle")))

    assert line["request_id"] == "req-1" and line["route"] == "/generate"
    assert line["status"] == 202 and line["duration"] == 0.5
    assert line["level"] == "WARNING" and line["logger"] == "imagegen.test" and line["time"]
    assert in_job["job_id"] == "job-9" and in_job["worker"] == "w3"
    assert in_job["request_id"] == "req-1"
    assert set(outside) == {"time", "level", "logger", "message"}  # nothing it does not know


def test_a_json_line_holds_the_traceback_on_one_line():
    try:
        raise ValueError("boom")
    except ValueError:
        import sys

        made = logging.LogRecord("x", logging.ERROR, __file__, 1, "failed", (), sys.exc_info())
    text = JsonFormatter().format(made)
    assert "\n" not in text and "ValueError: boom" in json.loads(text)["exception"]
