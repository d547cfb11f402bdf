"""Driving the agent interface with the MCP SDK's own client, for tests and the docs' transcript.

:func:`connect` opens the SDK's ``Client`` on ``/mcp`` of an application in
process (streamable HTTP through the SDK's HTTP client over an ASGI
transport, the application's lifespan running); :func:`api` is a plain HTTP
client on the same application, for the API's side of a comparison;
:func:`stdio` spawns ``tablesafe mcp`` and connects to it.
"""

from __future__ import annotations

import os
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx2
from mcp import Client, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client

BASE = "http://testserver"


@asynccontextmanager
async def running(app: Any) -> AsyncIterator[None]:
    """The application's lifespan (the agent interface's session manager with it)."""
    async with app.router.lifespan_context(app):
        yield


def api(app: Any, key: str | None) -> httpx2.AsyncClient:
    """An HTTP client on the application in process, sending ``key``."""
    headers = {"x-api-key": key} if key else {}
    return httpx2.AsyncClient(
        transport=httpx2.ASGITransport(app), base_url=BASE, headers=headers, timeout=60
    )


@asynccontextmanager
async def connect(app: Any, key: str | None, *, mode: str = "auto") -> AsyncIterator[Client]:
    """The SDK's client on ``/mcp`` of the application in process, sending ``key``."""
    async with (
        api(app, key) as http,
        Client(streamable_http_client(f"{BASE}/mcp", http_client=http), mode=mode) as client,
    ):
        yield client


def stdio_parameters(config: Path, key: str | None, **env: str) -> StdioServerParameters:
    """``tablesafe mcp --config CONFIG`` with ``key`` in TABLESAFE_API_KEY, as an assistant starts it."""
    environment = {k: v for k, v in os.environ.items() if k != "TABLESAFE_API_KEY"}
    src = str(Path(__file__).resolve().parents[1] / "src")
    environment["PYTHONPATH"] = os.pathsep.join(
        p for p in (src, environment.get("PYTHONPATH")) if p
    )
    if key is not None:
        environment["TABLESAFE_API_KEY"] = key
    environment.update(env)
    return StdioServerParameters(
        command=sys.executable,
        args=["-m", "tablesafe", "mcp", "--config", str(config)],
        env=environment,
    )


def innermost(exc: BaseException) -> BaseException:
    """The error inside the task groups' exception groups."""
    while isinstance(exc, BaseExceptionGroup):
        exc = exc.exceptions[0]
    return exc
