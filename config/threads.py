"""The request threads this process serves with, for the bounds kept below them.

In gunicorn, its own `threads` setting, parsed again by gunicorn's own parser. So any way of
starting gunicorn gets bounds below its real count. Elsewhere, GUNICORN_THREADS."""

import sys


def gunicorn_threads() -> int | None:
    """None outside gunicorn, or when the command line is not gunicorn's own."""
    if "gunicorn.arbiter" not in sys.modules:
        return None
    from gunicorn.app.wsgiapp import WSGIApplication

    try:
        parsed = WSGIApplication("%(prog)s [OPTIONS] [APP_MODULE]")
    except (Exception, SystemExit):  # argparse exits on a command line it does not know
        return None
    threads = parsed.cfg.threads
    return threads if isinstance(threads, int) and threads >= 1 else None
