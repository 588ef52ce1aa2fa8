"""An ASGI app (the MCP SDK's, at /mcp) answered from a Django view.

gunicorn runs WSGI. a2wsgi runs the app on its own thread's loop, where this module starts its
lifespan first. The route stays a Django route, with the project's middleware, auth and
errors."""

import asyncio
import io
from collections.abc import Awaitable, Callable, Iterator
from typing import Any, cast

from a2wsgi import ASGIMiddleware
from django.http import HttpRequest, StreamingHttpResponse

REQUEST_KEY = "core.asgi_bridge.request"  # the Django request, in the app's scope's environ
TASK_KEY = "core.asgi_bridge.task"  # the app's task answering it
STARTUP_SECONDS = 30
# How long a finished answer waits for the app's own task to end.
AFTER_ANSWER_SECONDS = 5.0


# An ASGI app as the libraries type it (Starlette's MutableMapping messages).
AsgiApp = Callable[[Any, Any, Any], Awaitable[None]]


class LifespanFailed(RuntimeError):
    pass


class AsgiBridge:
    """One ASGI app on one event loop thread, started once."""

    def __init__(self, app: AsgiApp) -> None:
        self._app = app
        self._wsgi = ASGIMiddleware(cast(Any, self._tracked), wait_time=AFTER_ANSWER_SECONDS)
        loop = self._wsgi.loop
        started = asyncio.run_coroutine_threadsafe(_lifespan(app), loop)
        try:
            started.result(timeout=STARTUP_SECONDS)
        except BaseException:  # not started: its loop's thread ends, not left idle for ever
            loop.call_soon_threadsafe(loop.stop)
            raise

    async def _tracked(self, scope: Any, receive: Any, send: Any) -> None:
        """Names the app's task in the environ, so it can be cancelled if the client leaves."""
        scope["wsgi_environ"][TASK_KEY] = asyncio.current_task()
        await self._app(scope, receive, send)

    def answer(self, request: HttpRequest) -> StreamingHttpResponse:
        """Streamed as it comes, server-sent events included. Django reads the body, so
        MAX_BODY_BYTES holds."""
        body = request.body
        environ = {
            **request.META,  # a WSGI request's META is its environ
            "wsgi.input": io.BytesIO(body),
            "CONTENT_LENGTH": str(len(body)),
            REQUEST_KEY: request,
        }
        started: dict[str, Any] = {}

        def start_response(status: str, headers: list[tuple[str, str]], exc_info=None) -> None:
            started.update(status=int(status.split()[0]), headers=headers)

        chunks: Iterator[bytes] = iter(self._wsgi(environ, start_response))  # type: ignore[arg-type]
        first = next(chunks, b"")  # the app has started its answer once it sends a chunk
        answer = _answer(first, chunks, lambda: self._cancel(environ.get(TASK_KEY)))
        response = StreamingHttpResponse(answer, status=started.get("status", 500))
        for name, value in started.get("headers", []):
            response[name] = value
        if response.get("Content-Type", "").startswith("text/event-stream"):
            response["X-Accel-Buffering"] = "no"  # a front proxy passes each event at once
        return response

    def _cancel(self, task: "asyncio.Task[Any] | None") -> None:
        if task is not None:
            self._wsgi.loop.call_soon_threadsafe(task.cancel)


def _answer(first: bytes, rest: Iterator[bytes], gone: Callable[[], None]) -> Iterator[bytes]:
    """Cancels the app's task when the client leaves, as an ASGI server does.

    a2wsgi alone would leave it waiting for ever."""
    finished = False
    try:
        yield first
        yield from rest
        finished = True
    finally:
        if not finished:
            gone()


async def _lifespan(app: AsgiApp) -> None:
    """Returns once startup completed; the lifespan task then lives with the process."""
    queue: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
    ready: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    await queue.put({"type": "lifespan.startup"})

    async def receive() -> dict[str, Any]:
        return await queue.get()

    async def send(message: dict[str, Any]) -> None:
        if message["type"] == "lifespan.startup.complete" and not ready.done():
            ready.set_result(None)
        elif message["type"] == "lifespan.startup.failed" and not ready.done():
            ready.set_exception(LifespanFailed(message.get("message", "")))

    scope = {"type": "lifespan", "asgi": {"version": "3.0", "spec_version": "2.0"}, "state": {}}
    task = asyncio.ensure_future(app(scope, receive, send))
    task.add_done_callback(lambda done: _ended_early(done, ready))
    _running.add(task)  # a reference, so the task is not collected while it runs
    await ready


def _ended_early(task: asyncio.Future[Any], ready: asyncio.Future[None]) -> None:
    if not ready.done():
        cause = None if task.cancelled() else task.exception()
        ready.set_exception(LifespanFailed(f"the app's lifespan ended before startup: {cause!r}"))


_running: set[asyncio.Future[Any]] = set()
