"""The page's queue poll (GET /jobs?unfinished=true, once a second while a job runs) does not
flood the logs: gunicorn's access log (under gunicorn) and LOG_FORMAT=json's request lines (in
process) write a poll that succeeds at debug only; any other request, and a refused poll, as
before."""

import logging
from pathlib import Path

import pytest
import requests
from django.http import HttpResponse
from django.test import RequestFactory

from core.middleware import RequestIdMiddleware
from tests.support.processes import AppServer

POLL = "/jobs?unfinished=true&limit=200"


def access_lines(tmp_path: Path, **env: str) -> str:
    """The app's log after a poll, another listing and a refused poll."""
    tmp_path.mkdir()
    app = AppServer({"ACCESS_LOG": "1", **env}, tmp_path / "app.log").start()
    try:
        assert requests.get(app.url(POLL), timeout=30).status_code == 200
        assert requests.get(app.url("/jobs?limit=5"), timeout=30).status_code == 200
        assert requests.get(app.url("/jobs?unfinished=maybe"), timeout=30).status_code == 400
    finally:
        app.stop()
    return (tmp_path / "app.log").read_text()


def test_the_access_log_leaves_the_pages_poll_out_unless_at_debug(tmp_path):
    # Access lines carry no query string: the listing and the poll both read "GET /jobs".
    quiet = access_lines(tmp_path / "info")
    assert quiet.count('"GET /jobs HTTP/1.1" 200') == 1  # the other listing, not the poll
    assert '"GET /jobs HTTP/1.1" 400' in quiet  # a refused poll stays seen
    loud = access_lines(tmp_path / "debug", GUNICORN_CMD_ARGS="--log-level debug")
    assert loud.count('"GET /jobs HTTP/1.1" 200') == 2


@pytest.mark.parametrize(
    ("path", "status", "level"),
    [(POLL, 200, logging.DEBUG), ("/jobs?limit=5", 200, logging.INFO),
     (POLL, 503, logging.INFO)],
)  # fmt: skip
def test_a_json_request_line_of_a_poll_is_at_debug(settings, caplog, path, status, level):
    settings.LOG_FORMAT = "json"
    middleware = RequestIdMiddleware(lambda request: HttpResponse(status=status))
    with caplog.at_level(logging.DEBUG, logger="config.requests"):
        middleware(RequestFactory().get(path))
    [record] = [r for r in caplog.records if r.name == "config.requests"]
    assert record.levelno == level
