"""``/mcp``, built at its first request. Importing the MCP SDK costs a process about half a second
of CPU, a third of what ``flowli serve`` spends to start; a service that no assistant talks to
never pays it. The first request to ``/mcp`` imports it in a thread (the event loop goes on
answering every other route meanwhile), builds the server (the gate in front of it:
``_mcp_gate``), and starts the SDK's session manager in a task of its own, which runs until
``close`` (``serve`` closes it when it stops)."""

from __future__ import annotations

import asyncio
import contextlib
import importlib
from typing import Any

from starlette.types import ASGIApp, Receive, Scope, Send

from flowli.access import Applications
from flowli.services import Services


class McpMount:
    def __init__(self, services: Services, apps: Applications, host: str):
        self._services, self._apps, self._host = services, apps, host
        self._app: ASGIApp | None = None
        self._lock = asyncio.Lock()
        self._stop = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self.server: Any = None
        """The MCP server once ``/mcp`` was asked for (None before)."""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        app = self._app if self._app is not None else await self._started()
        await app(scope, receive, send)

    async def _started(self) -> ASGIApp:
        async with self._lock:
            if self._app is None:
                for name in ("flowli.http._mcp_gate", "flowli.mcp"):  # the SDK's import, off the event loop
                    await asyncio.to_thread(importlib.import_module, name)
                from flowli.mcp import build, from_headers

                from ._mcp_gate import MCP_SESSION_IDLE_SECONDS, NO_SDK_CHECK, McpGate

                server = build(self._services, from_headers(self._apps))
                # the Host and Origin of /mcp are checked with every other route's (HostGuard), not by the SDK
                app = McpGate(server.streamable_http_app(
                    streamable_http_path="/mcp", host=self._host, transport_security=NO_SDK_CHECK,
                    session_idle_timeout=MCP_SESSION_IDLE_SECONDS), self._apps)
                running = asyncio.get_running_loop().create_future()
                self._task = asyncio.create_task(self._run(server, running), name="flowli-mcp-sessions")
                await running  # the session manager runs (or its start failed: raised here)
                self.server, self._app = server, app
        return self._app

    async def _run(self, server: Any, running: asyncio.Future[None]) -> None:
        try:
            async with server.session_manager.run():
                running.set_result(None)
                await self._stop.wait()
        except BaseException as exc:
            if not running.done():
                running.set_exception(exc)
            raise

    async def close(self) -> None:
        """Stop the session manager, if ``/mcp`` started it (its open sessions end)."""
        self._stop.set()
        if self._task is not None:
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
