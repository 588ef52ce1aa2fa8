"""A worker's own output: what libraries write to stderr while it works (the progress bars of
a model's load) stays plain output, as in the web process, and is not logged as Celery's
`WARNING celery.redirected` lines, which read as trouble. The worker is the session's shared
stack's (tests/conftest.py `shared_stack`), which loaded the model under Celery's worker when
the pull reached it, and has run the jobs of every module that used it since."""

from tests.support.distributed import Stack


def test_a_distributed_workers_progress_bars_are_not_logged_as_warnings(shared_stack: Stack):
    (worker,) = shared_stack.workers
    log = worker.log().decode(errors="replace")
    assert "Loading pipeline components" in log, log  # the load's bar, written as it was
    assert "celery.redirected" not in log, log
