"""The request threads this process serves with, for the bounds kept below them
(EVENT_STREAMS_MAX, SYNC_WAITERS_MAX, JOB_STORE_MAX_CONCURRENT, TODO_MAX_CONCURRENT).

In a gunicorn worker it is gunicorn's own `threads` setting, parsed again by gunicorn's own
parser from what the worker was started with (its command line, GUNICORN_CMD_ARGS, its config
file), so any way of starting gunicorn (`gunicorn config.wsgi --threads 8`, the project's
config file, the container) gets bounds below its real count. Elsewhere (a management
command, a test in process) it is GUNICORN_THREADS.
"""

import sys


def gunicorn_threads() -> int | None:
    """The `threads` of the gunicorn that runs this process; None outside gunicorn or where
    its command line is not gunicorn's own (an application embedding gunicorn)."""
    if "gunicorn.arbiter" not in sys.modules:
        return None
    from gunicorn.app.wsgiapp import WSGIApplication

    try:
        parsed = WSGIApplication("%(prog)s [OPTIONS] [APP_MODULE]")
    except (Exception, SystemExit):  # argparse exits on a command line it does not know
        return None
    threads = parsed.cfg.threads
    return threads if isinstance(threads, int) and threads >= 1 else None
