"""`manage.py run_worker` outside distributed mode refuses to start, saying why (the command's
own check, run in this process as manage.py runs it: tests/support/commands.py)."""

from tests.support.commands import run_command


def test_run_worker_without_job_broker_url_refuses_naming_the_setting():
    done = run_command("run_worker", env={"JOB_BROKER_URL": ""})
    assert done.returncode != 0
    assert "JOB_BROKER_URL is not set" in done.stderr
