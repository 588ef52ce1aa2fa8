"""manage.py gate against real processes: the app under gunicorn, a placeholder http.server,
a closed port, a failing hub, a slow download, and a scripted service for what the app does
only by accident (a silent pull, flapping or restarting status); each ends with its own exit
code. A cold deployment (gunicorn) runs the gate as its own process; the rest, the warm
deployment among them, run the same command in this process (run_command, or run_beside next
to the app served in this process: served_here), which answers the same exit code and output
without a Python start each."""

import re
import subprocess
import sys
import time

import pytest

from tests.support.commands import Result, manage, run_beside, run_command
from tests.support.in_process import served_here
from tests.support.model_service import wait_for_state
from tests.support.processes import ROOT, free_port, wait_for_http
from tests.support.scripted_service import DROP, HANG, Reply, ScriptedService, model_state

FAST = ["--interval", "0.2", "--health-timeout", "20", "--timeout", "60"]


def gate(base_url: str, *extra: str, env: dict[str, str] | None = None):
    """The gate as an operator runs it: a process of its own."""
    return manage("gate", "--base-url", base_url, *FAST, *extra, env=env)


def gate_here(base_url: str, *extra: str):
    """The same command line run in this process."""
    return run_command("gate", "--base-url", base_url, *FAST, *extra)


def gate_beside(base_url: str, *extra: str):
    """The same command line run in this process beside the app it serves (served_here)."""
    return run_beside("gate", "--base-url", base_url, *FAST, *extra)


def test_cold_then_warm_deployment_passes(start_app, model_env, hub, tmp_path):
    cold = gate(start_app().base_url)
    assert cold.returncode == 0, cold.stderr
    lines = cold.stdout.splitlines()
    assert lines[0].startswith("gate: health: ok")
    # The pull answers with the state already moved on: so a later `not_started` can only
    # be a new process (the gate's restart rule; scripted below).
    assert lines[1] == "gate: pull: accepted (202), state downloading"
    assert any("downloading" in line or "loading" in line for line in lines)
    assert "gate: status: ready on cpu" in cold.stdout
    assert lines[-1] == "gate: passed"

    hub.reset_log()  # a new revision: a new backend, served here, on the warm share
    warm_env = {**model_env, "DOWNLOAD_CACHE_DIR": str(tmp_path / "cache-warm")}
    with served_here(**warm_env) as app:
        warm = gate_beside(app.base_url)
    assert warm.returncode == 0, warm.stderr
    assert warm.stdout.splitlines()[1] == "gate: pull: accepted (202), state loading"
    assert "downloading" not in warm.stdout
    assert hub.file_gets() == []


@pytest.fixture
def placeholder(tmp_path):
    """The seed's placeholder: a static file server where the application should be."""
    port = free_port()
    (tmp_path / "index.html").write_text("<h1>placeholder</h1>")
    server = subprocess.Popen(
        [sys.executable, "-m", "http.server", str(port), "--bind", "127.0.0.1"],
        cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    wait_for_http(url + "/", 10, server)
    yield url
    server.terminate()
    server.wait()


def test_a_placeholder_file_server_fails_at_step_a(placeholder):
    started = time.monotonic()
    result = gate_here(placeholder)
    assert result.returncode == 10
    assert "container command was overridden" in result.stderr
    assert "image's own command" in result.stderr
    assert time.monotonic() - started < 20  # at once: no waiting for --health-timeout


def test_nothing_listening_is_a_health_timeout():
    result = run_command(
        "gate", "--base-url", f"http://127.0.0.1:{free_port()}", "--health-timeout", "1"
    )
    assert result.returncode == 11
    assert "/health did not succeed within 1s" in result.stderr


def test_a_hub_error_fails_fast_long_before_the_timeout(model_env, hub):
    hub.fail_status = 500
    started = time.monotonic()
    with served_here(**model_env) as app:
        result = gate_beside(app.base_url, "--timeout", "600")
    assert result.returncode == 13
    assert "the model failed" in result.stderr and "500" in result.stderr
    # /model/status's error, as a person reads it: what happened, what to do, the raw cause.
    assert f"The model hub at {hub.url} failed (HTTP 500), a fault on its side" in result.stderr
    assert "Cause: HfHubHTTPError: " in result.stderr
    assert time.monotonic() - started < 60


def test_a_load_slower_than_the_timeout_is_a_ready_timeout(model_env, hub):
    hub.throttle_bytes_per_sec = 100_000
    with served_here(**model_env) as app:
        result = gate_beside(app.base_url, "--timeout", "1")
        hub.throttle_bytes_per_sec = None  # the pull this process runs ends with the test
        wait_for_state(app, {"ready", "failed"})
    assert result.returncode == 14
    assert "not ready within 1s (last state: downloading)" in result.stderr


def test_a_refused_pull_is_its_own_failure(model_env):
    with served_here(**model_env, API_TOKEN="right-token") as app:
        result = gate_beside(app.base_url, "--token", "wrong-token")
        assert result.returncode == 12
        assert "POST /model/pull answered 401" in result.stderr
        assert gate_beside(app.base_url, "--token", "right-token").returncode == 0


# -- against a scripted service: what the real app shows only by accident -------------------

# A healthy service that accepts the pull, as the app does (202, the state already moved).
ACCEPTING = {
    "GET /health": [Reply(200, {"status": "healthy"})],
    "POST /model/pull": [model_state("downloading", status=202)],
}


def scripted_gate(script: dict, *extra: str) -> tuple[Result, list[str]]:
    """Runs the gate against a scripted service (1 s per request); returns the gate's result
    and the requests the service received."""
    with ScriptedService({**ACCEPTING, **script}) as service:
        result = gate_here(service.base_url, "--request-timeout", "1", *extra)
    return result, service.requests


def assert_one_line_failure(result: Result, code: int, text: str) -> None:
    assert result.returncode == code, (result.stdout, result.stderr)
    assert result.stderr.startswith("gate: FAILED: ") and text in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr  # no traceback


@pytest.mark.parametrize("silence", [HANG, DROP], ids=["never-answers", "connection-dropped"])
def test_a_pull_that_gets_no_answer_is_a_refused_pull(silence):
    started = time.monotonic()
    result, seen = scripted_gate({"POST /model/pull": [silence]})
    assert_one_line_failure(result, 12, "POST /model/pull got no answer")
    assert "GET /model/status" not in seen  # it stopped at the pull
    assert time.monotonic() - started < 8  # --request-timeout 1, not the default 10 s


def test_one_or_two_unanswered_polls_in_a_row_do_not_end_the_gate():
    flapping = [model_state("loading"), DROP, HANG, model_state("loading"), DROP, DROP]
    result, seen = scripted_gate({"GET /model/status": [*flapping, model_state("ready")]})
    assert result.returncode == 0, result.stderr
    assert seen.count("GET /model/status") == 7
    assert "gate: status: no answer (2 of 3 in a row)" in result.stdout
    assert result.stdout.splitlines()[-1] == "gate: passed"


def test_three_unanswered_polls_in_a_row_end_the_gate_at_once():
    unanswered = [model_state("loading"), DROP, HANG, DROP, model_state("ready")]
    started = time.monotonic()
    result, seen = scripted_gate({"GET /model/status": unanswered}, "--timeout", "30")
    assert_one_line_failure(result, 13, "/model/status did not answer 3 polls in a row")
    assert seen.count("GET /model/status") == 4  # not one poll more
    assert time.monotonic() - started < 20  # long before --timeout


def test_a_return_to_not_started_is_a_restart_not_a_timeout():
    restarted = [model_state("downloading"), model_state("loading"), model_state("not_started")]
    started = time.monotonic()
    result, seen = scripted_gate({"GET /model/status": restarted}, "--timeout", "30")
    assert_one_line_failure(result, 13, "the process restarted during the load")
    assert seen.count("GET /model/status") == 3
    assert time.monotonic() - started < 20  # long before --timeout


def test_an_error_answer_from_status_ends_the_gate_at_once():
    erroring = [model_state("loading"), Reply(502, {"error": "bad gateway"}), model_state("ready")]
    result, seen = scripted_gate({"GET /model/status": erroring}, "--timeout", "30")
    assert_one_line_failure(result, 13, "/model/status answered 502")
    assert seen.count("GET /model/status") == 2


def documented_exit_codes() -> dict[int, str]:
    """The gate's exit-code table in docs/operations.md: code -> meaning, without backticks."""
    section = (ROOT / "docs" / "operations.md").read_text().split("## The gate\n", 1)[1]
    section = section.split("\n## ", 1)[0]  # its own section's table, not a later one's
    rows = re.findall(r"^\| (\d+) \| (.+?) \|$", section, flags=re.MULTILINE)
    return {int(code): meaning.replace("`", "") for code, meaning in rows}


def test_help_lists_every_exit_code_the_docs_promise_with_its_meaning():
    promised = documented_exit_codes()
    assert sorted(promised) == [0, 10, 11, 12, 13, 14, 15]
    result = run_command("gate", "--help")
    assert result.returncode == 0, result.stderr
    listing = result.stdout.split("exit codes:", 1)[1]
    listed = dict(re.findall(r"^  (\d+) +(.+?)(?=^  \d|\Z)", listing, flags=re.M | re.S))
    listed = {int(code): " ".join(meaning.split()) for code, meaning in listed.items()}
    assert listed == promised
