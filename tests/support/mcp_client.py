"""The MCP SDK's own client on a running app's /mcp, as an agent connects to it: over HTTP,
with the Authorization header its configuration names."""

from collections.abc import AsyncIterator, Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager
from typing import Any, TypeVar

import anyio
import httpx2
from mcp.client import Client
from mcp.client.streamable_http import streamable_http_client
from mcp_types import CallToolResult

Progress = list[tuple[float, float | None, str | None]]
T = TypeVar("T")


def run_async(main: Callable[[], Awaitable[T]]) -> T:
    """anyio.run in a thread of its own: a Playwright browser an earlier test started leaves
    an event loop running in this thread, and anyio.run refuses to start beside it."""
    with ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(anyio.run, main).result()


@asynccontextmanager
async def connected(url: str, headers: dict[str, str]) -> AsyncIterator[Client]:
    """The SDK's client on `url`, its HTTP requests carrying `headers`."""
    async with (
        httpx2.AsyncClient(headers=headers, timeout=120) as http,
        Client(streamable_http_client(url, http_client=http)) as client,
    ):
        yield client


def call_tool(
    url: str, headers: dict[str, str], name: str, arguments: dict[str, Any]
) -> tuple[CallToolResult, Progress]:
    """The tool's answer, and the progress notifications that came before it."""
    seen: Progress = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        seen.append((progress, total, message))

    async def main() -> CallToolResult:
        async with connected(url, headers) as client:
            return await client.call_tool(name, arguments, progress_callback=on_progress)

    return run_async(main), seen


def tool_names(url: str, headers: dict[str, str]) -> set[str]:
    async def main() -> set[str]:
        async with connected(url, headers) as client:
            return {tool.name for tool in (await client.list_tools()).tools}

    return run_async(main)
