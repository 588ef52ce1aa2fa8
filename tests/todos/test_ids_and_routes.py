"""Missing ids, unknown ids, unmatched paths and wrong methods, each with its exact answer."""

import pytest

NOT_FOUND_BODY = {"data": None, "error": "Not Found"}


@pytest.mark.parametrize("method", ["GET", "PUT", "DELETE"])
@pytest.mark.parametrize("path", ["/todo", "/todo/", "/todo/%20", "/todo/%20%20"])
def test_missing_id_is_400_id_is_required(app, http, method, path):
    response = http.request(method, app.url(path), json={"todo": {"title": "x"}})
    assert response.status_code == 400
    assert response.json() == {"data": None, "error": {"message": "id is required"}}


@pytest.mark.parametrize("todo_id", ["0" * 24, "zzz", "123", "6b02ab5220f488b9b36cc1c"])
@pytest.mark.parametrize("method", ["GET", "PUT", "DELETE"])
def test_unknown_or_malformed_id_is_404(app, http, todo_id, method):
    response = http.request(method, app.url(f"/todo/{todo_id}"), json={"todo": {"title": "x"}})
    assert response.status_code == 404
    assert response.json() == {"data": None, "error": {"message": "Todo not found"}}


def test_deleted_todo_is_gone(app, http, create):
    todo = create("short-lived")
    assert http.delete(app.url(f"/todo/{todo['id']}")).status_code == 202
    assert http.get(app.url(f"/todo/{todo['id']}")).status_code == 404
    assert http.delete(app.url(f"/todo/{todo['id']}")).status_code == 404


@pytest.mark.parametrize(
    "path", ["/todo/a/b", "/todos/", "/todos/x", "/todos/x/y", "/todo/abc/def/ghi"]
)
@pytest.mark.parametrize("method", ["GET", "POST", "DELETE"])
def test_unmatched_paths_answer_the_seeds_not_found_body(app, http, path, method):
    response = http.request(method, app.url(path))
    assert response.status_code == 404
    assert response.json() == NOT_FOUND_BODY


@pytest.mark.parametrize(
    ("method", "path", "allowed"),
    [
        ("POST", "/todos", "DELETE, GET, PATCH"),
        ("PUT", "/todos", "DELETE, GET, PATCH"),
        ("PATCH", "/todo/" + "0" * 24, "DELETE, GET, PUT"),
        ("POST", "/todo/" + "0" * 24, "DELETE, GET, PUT"),
        ("DELETE", "/", "GET"),
    ],
)
def test_wrong_method_is_405_in_the_envelope(app, http, method, path, allowed):
    response = http.request(method, app.url(path))
    assert response.status_code == 405
    body = response.json()
    assert body["data"] is None and method in body["error"]["message"]
    assert response.headers["Allow"] == allowed
