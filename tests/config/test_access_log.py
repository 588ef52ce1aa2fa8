"""gunicorn's access log under the project's config: a line per request with the method,
path and status, but no query string or referer (a signed image link's signature is a
credential while it lasts), and no credential a client sends (a bearer token, Basic's
password)."""

import time

import requests

SECRET = "THE-SIGNATURE-IN-THE-QUERY"


def test_the_access_log_drops_query_strings_and_referers(start_app) -> None:
    app = start_app(ACCESS_LOG="1")
    link = app.url(f"/v1/images/{'0' * 32}.png?signature={SECRET}&output_format=webp")
    assert requests.get(link, headers={"Referer": f"https://x.example/?{SECRET}"}).status_code
    assert requests.get(app.url(f"/health?{SECRET}"), timeout=10).ok
    bearer = {"Authorization": f"Bearer {SECRET}-TOKEN"}
    assert requests.get(app.url("/jobs"), headers=bearer, timeout=10).status_code
    assert requests.get(app.url("/sdapi/v1/options"), auth=("me", f"{SECRET}-PW"), timeout=10)
    # gunicorn writes a line once its thread is done with the request, which may be after the
    # next request's: wait for both lines.
    image_line = f'"GET /v1/images/{"0" * 32}.png HTTP/1.1" 40'
    deadline = time.monotonic() + 10
    while image_line not in (log := app.log_path.read_text()) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert image_line in log, log[-2000:]
    assert '"GET /health HTTP/1.1" 200' in log
    jobs_line = '"GET /jobs HTTP/1.1"'
    while jobs_line not in (log := app.log_path.read_text()) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert jobs_line in log, log[-2000:]
    assert SECRET not in log
