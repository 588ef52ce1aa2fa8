"""Gunicorn settings for every way the service runs.

One worker process: model state is per process, and 14 GB must not load twice. Threads serve
/health and status while a download, load or generation runs."""

import os

bind = os.environ.get("BIND", "127.0.0.1:8000")
workers = 1
# Enough that synchronous generations waiting in the queue leave threads for the other routes.
threads = int(os.environ.get("GUNICORN_THREADS", "16"))
worker_class = "gthread"
# A synchronous CPU generation can take minutes; the worker must not be killed for it.
timeout = int(os.environ.get("GUNICORN_TIMEOUT", "900"))
graceful_timeout = int(os.environ.get("GUNICORN_GRACEFUL_TIMEOUT", "30"))
keepalive = 5
# Above gunicorn's 4094: a long line reaches the service, which answers in its own shape, not an
# HTML 414.
limit_request_line = 8190
accesslog = "-" if os.environ.get("ACCESS_LOG", "1") != "0" else None
logger_class = "config.access_log.AccessLog"  # the page's queue poll only at debug
# gunicorn's default line without query (%(r)s) or referer (%(f)s). A signed image link is a
# credential while it lasts, and a referer carries another page's query.
access_log_format = '%(h)s %(l)s %(u)s %(t)s "%(m)s %(U)s %(H)s" %(s)s %(b)s "%(a)s"'
errorlog = "-"
wsgi_app = "config.wsgi:application"
# The control socket in $HOME collides between instances; nothing here uses it.
control_socket_disable = True
