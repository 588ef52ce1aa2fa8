"""gunicorn's access log, with the page's queue poll kept to debug.

The page polls GET /jobs?unfinished=true every second while anything runs. At INFO those lines
are most of the log. A successful poll is written only at `--log-level debug`; a refused one
always."""

import logging
from typing import Any

from gunicorn.glogging import Logger

from core.logs import is_quiet_poll


class AccessLog(Logger):
    def access(self, resp: Any, req: Any, environ: dict, request_time: Any) -> None:
        quiet = (
            is_quiet_poll(
                environ.get("REQUEST_METHOD", ""),
                environ.get("PATH_INFO", ""),
                environ.get("QUERY_STRING", ""),
            )
            and getattr(resp, "status_code", 500) < 400
            and not self.error_log.isEnabledFor(logging.DEBUG)
        )
        if not quiet:
            super().access(resp, req, environ, request_time)
