"""Odd and hostile requests through gunicorn (chunked bodies, which gunicorn de-chunks) or in
process (what the app alone decides): each gets an answer in the service's own error shape
(never a 500 or gunicorn's HTML), and bodies sent chunked are read like any other."""

import io
import logging

import requests
from django.conf import settings
from django.test import override_settings

from core.logs import ExpectedAnswers
from tests.support.in_process import loopback, settings_for, todos_here
from tests.support.processes import AppServer, free_port


def chunks(*parts: bytes):
    """A body requests sends with Transfer-Encoding: chunked (it has no length)."""
    yield from parts


def test_a_chunked_todo_is_read_like_any_other(app: AppServer):
    body = chunks(b'{"todo": {"title": "sent in ', b'chunks"}}')
    response = requests.post(
        app.url("/todo"), data=body, headers={"Content-Type": "application/json"}, timeout=10
    )
    assert response.request.headers["Transfer-Encoding"] == "chunked"
    assert response.status_code == 201, response.text
    assert response.json()["data"]["title"] == "sent in chunks"
    requests.delete(app.url(f"/todo/{response.json()['data']['id']}"), timeout=10)


def test_a_chunked_generate_form_is_read_like_any_other(app: AppServer):
    body = chunks(b"prompt=a%20cat&", b"steps=0")
    response = requests.post(
        app.url("/generate"),
        data=body,
        headers={"Content-Type": "application/x-www-form-urlencoded"},
        timeout=10,
    )
    assert response.status_code == 400  # the form was read: the refusal names steps, not prompt
    assert [d["field"] for d in response.json()["error"]["details"]] == ["steps"]


def test_a_chunked_body_over_the_limit_is_413(start_app):
    app = start_app(MAX_BODY_BYTES="2048")
    body = chunks(b'{"todo": {"title": "x", "description": "', b"y" * 4096, b'"}}')
    response = requests.post(
        app.url("/todo"), data=body, headers={"Content-Type": "application/json"}, timeout=10
    )
    assert response.status_code == 413
    assert response.json() == {
        "data": None,
        "error": {"message": "The request body is too large"},
    }


def test_too_many_fields_is_a_400_naming_the_limit(app: AppServer):
    many = [("a", "1")] * 1001  # Django counts repeated names too
    for response in (
        requests.post(app.url("/generate"), data=many, timeout=10),
        requests.get(app.url("/jobs"), params=many, timeout=10),
        requests.get(app.url("/images"), params=many, timeout=10),
    ):
        assert response.status_code == 400, response.text
        assert response.json()["error"]["details"] == [
            {"field": "request", "message": "has more than 1000 fields"}
        ]


def test_too_many_file_parts_is_a_400(app: AppServer):
    files = {f"part{i}": (f"{i}.txt", b"x") for i in range(101)}
    response = requests.post(app.url("/generate"), files=files, timeout=10)
    assert response.status_code == 400, response.text
    assert "more than 100 file parts" in response.json()["error"]["message"]


def test_head_answers_like_get_without_a_body(app: AppServer):
    for path in ("/health", "/todos", "/model/status", "/api"):
        get = requests.get(app.url(path), timeout=10)
        head = requests.head(app.url(path), timeout=10)
        assert head.status_code == get.status_code == 200, path
        assert head.content == b""
        assert head.headers["Content-Type"] == get.headers["Content-Type"]


def test_a_5000_character_id_is_a_404_in_each_service_shape(app: AppServer):
    long_id = "a" * 5000
    job = requests.get(app.url(f"/jobs/{long_id}"), timeout=10)
    assert job.status_code == 404
    assert set(job.json()) == {"error"}
    todo = requests.get(app.url(f"/todo/{long_id}"), timeout=10)
    assert todo.status_code == 404
    assert todo.json() == {"data": None, "error": {"message": "Todo not found"}}


def test_an_expected_503_is_logged_as_one_warning_line_not_an_error():
    """In process, through a handler made as LOGGING's console handler is (its format and its
    filter): what a service's log shows of a request the database could not answer."""
    log = io.StringIO()
    console = logging.StreamHandler(log)
    console.setFormatter(logging.Formatter(settings.LOGGING["formatters"]["plain"]["format"]))
    console.addFilter(ExpectedAnswers())
    root = logging.getLogger()
    root.addHandler(console)
    unreachable = f"mongodb://127.0.0.1:{free_port()}/todos"
    try:
        with override_settings(MONGODB_TIMEOUT_MS=300), todos_here(unreachable) as app:
            assert requests.get(app.url("/todos"), timeout=10).status_code == 503
    finally:
        root.removeHandler(console)
    text = log.getvalue()
    warnings = [line for line in text.splitlines() if "database unreachable" in line]
    assert len(warnings) == 1 and " WARNING " in warnings[0]
    assert "Topology Description" not in text
    assert " ERROR " not in text and "Traceback" not in text


def test_a_file_part_past_the_limit_is_413_on_every_route_that_takes_one():
    """Django's own limit leaves file parts out; MAX_BODY_BYTES counts them (core.uploads),
    so an image of any size is refused before it is read, in each route's error shape. In
    process: the limit is read per request."""
    big = {"image": ("in.png", b"\x89PNG" + b"x" * 200_000, "image/png")}
    with override_settings(**settings_for({"MAX_BODY_BYTES": "4096"})), loopback() as base_url:
        for path in ("/generate", "/v1/images/edits"):
            response = requests.post(base_url + path, data={"prompt": "p"}, files=big, timeout=30)
            assert response.status_code == 413, (path, response.text)
            assert "too large" in response.text, path
        small = requests.post(
            base_url + "/generate", data={"prompt": "p", "steps": "0"},
            files={"image": ("in.png", b"x" * 100, "image/png")}, timeout=30,
        )  # fmt: skip
    assert small.status_code == 400  # under the limit: read, and refused for what it is
