"""Gunicorn settings for every way the service runs (scripts/serve.py, the container image).

One worker process: the model's state is per process and its 14 GB must not be loaded twice.
Threads serve /health and status requests while a download, a load or a generation runs.
"""

import os

bind = os.environ.get("BIND", "127.0.0.1:8000")
workers = 1
# Enough that synchronous generations waiting in the queue (GEN_QUEUE_MAX) leave threads
# for /health and the other routes.
threads = int(os.environ.get("GUNICORN_THREADS", "16"))
worker_class = "gthread"
# A synchronous generation on a CPU can take minutes; the worker must not be killed for it.
timeout = int(os.environ.get("GUNICORN_TIMEOUT", "900"))
graceful_timeout = int(os.environ.get("GUNICORN_GRACEFUL_TIMEOUT", "30"))
keepalive = 5
# gunicorn's largest request line (its default is 4094): a long id or query reaches the
# service, which answers it in its own error shape instead of gunicorn's HTML 414.
limit_request_line = 8190
accesslog = "-" if os.environ.get("ACCESS_LOG", "1") != "0" else None
logger_class = "config.access_log.AccessLog"  # the page's queue poll only at debug
# gunicorn's default line without the query string (%(r)s) or the referer (%(f)s): a signed
# image link's signature is a credential while it lasts, and a referer carries another
# page's query. The method, the path, the protocol, as the request line had them.
access_log_format = '%(h)s %(l)s %(u)s %(t)s "%(m)s %(U)s %(H)s" %(s)s %(b)s "%(a)s"'
errorlog = "-"
wsgi_app = "config.wsgi:application"
# The control socket lives in $HOME and collides between instances; nothing here uses it.
control_socket_disable = True
