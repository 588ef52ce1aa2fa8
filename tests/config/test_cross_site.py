"""A page on another site cannot act here through a visitor's browser, on an open service
(the suite's app under gunicorn, no token) as on a closed one: a body to a JSON route must say
it is JSON, a state-changing request a browser marks as another site's is refused, and the
service says it is open at start and in GET /api (docs/operations.md, Access control)."""

import json

import pytest
import requests

from tests.support.processes import AppServer

TODO = json.dumps({"todo": {"title": "from another site"}})
# What a cross-site page can send without a preflight: these three content types.
SIMPLE_TYPES = ["text/plain", "application/x-www-form-urlencoded", "multipart/form-data; b=x"]


def titles(app: AppServer) -> list[str]:
    return [todo["title"] for todo in requests.get(app.url("/todos"), timeout=10).json()["data"]]


@pytest.mark.parametrize("content_type", [*SIMPLE_TYPES, None])
@pytest.mark.parametrize(
    "path", ["/todo", "/v1/images/generations", "/sdapi/v1/txt2img", "/sdapi/v1/options"]
)
def test_a_body_to_a_json_route_must_say_it_is_json(
    app: AppServer, path: str, content_type: str | None
) -> None:
    body = TODO if path == "/todo" else json.dumps({"prompt": "x", "sd_model_checkpoint": "x"})
    headers = {"Content-Type": content_type} if content_type else {}
    refused = requests.post(app.url(path), data=body.encode(), headers=headers, timeout=10)
    assert refused.status_code == 415, refused.text
    assert "Content-Type: a request body here must be JSON" in refused.text
    assert "from another site" not in titles(app)


def test_json_and_body_less_requests_and_the_form_routes_still_pass(app: AppServer) -> None:
    created = requests.post(
        app.url("/todo"), data=TODO, headers={"Content-Type": "application/json; charset=utf-8"}
    )
    assert created.status_code == 201, created.text
    # Body-less, as the contract's clients, webuiapi and SillyTavern send them: no type.
    for method, path, expected in [
        ("POST", "/sdapi/v1/interrupt", 200),
        ("POST", "/sdapi/v1/skip", 200),
        ("POST", "/sdapi/v1/refresh-checkpoints", 200),
        ("DELETE", "/todos", 202),
    ]:
        answer = requests.request(method, app.url(path), timeout=10)
        assert answer.status_code == expected, (path, answer.text)
    # The native form route takes a form as before (the model is not pulled here: 503).
    form = requests.post(app.url("/generate"), data={"prompt": "a form"}, timeout=10)
    assert form.status_code not in (403, 415), form.text


@pytest.mark.parametrize(
    "browser",
    [
        {"Origin": "https://another.example"},
        {"Origin": "null"},
        {"Sec-Fetch-Site": "cross-site"},
        {"Sec-Fetch-Site": "same-site"},
    ],
)
def test_a_browsers_request_from_another_site_does_not_act(app: AppServer, browser) -> None:
    json_type = {"Content-Type": "application/json"}
    for method, path, body in [
        ("POST", "/todo", TODO),
        ("DELETE", "/todos", None),
        ("POST", "/generate", "prompt=x"),
        ("POST", "/model/pull", None),
        ("POST", "/sdapi/v1/interrupt", None),
    ]:
        answer = requests.request(
            method, app.url(path), data=body, headers={**json_type, **browser}, timeout=10
        )
        assert answer.status_code == 403, (path, answer.text)
        assert "another site may not change anything here" in answer.text
    assert "from another site" not in titles(app)
    assert requests.get(app.url("/model/status"), timeout=10).json()["state"] == "not_started"
    # Reads are not refused (no CORS: another site's page cannot read the answer).
    assert requests.get(app.url("/todos"), headers=browser, timeout=10).status_code == 200


def test_the_page_of_this_origin_acts(app: AppServer) -> None:
    own = app.url("").rstrip("/")
    headers = {"Origin": own, "Sec-Fetch-Site": "same-origin", "Content-Type": "application/json"}
    created = requests.post(app.url("/todo"), data=TODO, headers=headers, timeout=10)
    assert created.status_code == 201, created.text


def test_an_open_service_says_so_in_api_and_its_log(app: AppServer) -> None:
    index = requests.get(app.url("/api"), timeout=10).json()
    assert index["open"] is True
    assert "set API_TOKEN to close it" in index["warning"]
    assert "API_TOKEN is not set and API_KEYS is off" in app.log_path.read_text()
