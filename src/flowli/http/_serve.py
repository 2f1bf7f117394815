"""``flowli serve``: the HTTP service on uvicorn and, in the same process, the engine's worker
and sweeper (which run the pipelines' executions and expire their leases)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import socket
import sys
from collections.abc import Iterable
from typing import Any

import uvicorn

from flowli.engine import Engine, tuned_collector

from ._app import Pages, create_app


async def serve(engine: Engine, host: str = "127.0.0.1", port: int = 8081, *, lease_ttl: float = 30.0,
                worker: bool = True, concurrency: int = 256, announce: Any = None,
                pages: Pages | None = None, allowed_hosts: Iterable[str] = (), fd: int | None = None,
                own_process: bool = False) -> None:
    """Serve the HTTP service; ``pages`` (the dashboard) answer in front of its routes, behind the
    same checks of the Host and Origin (the loopback names, ``host`` unless a wildcard,
    ``allowed_hosts``) and the same body limit. ``fd``: serve that listening socket (inherited
    from ``flowli serve --workers``, which bound ``host:port``) instead of binding one.
    ``own_process``: the process does nothing but serve (``flowli serve``), so its garbage
    collector is tuned for it (``tuned_collector``); a program that serves beside other work
    keeps its own settings."""
    service = create_app(engine, lease_ttl=lease_ttl, host=host, allowed_hosts=allowed_hosts, pages=pages)
    logging.getLogger("mcp").setLevel(logging.WARNING)  # the SDK's session start and stop lines
    config = uvicorn.Config(service, host=host, port=port, log_level="warning", access_log=False, lifespan="off",
                            timeout_graceful_shutdown=3)
    server = uvicorn.Server(config)
    server.install_signal_handlers = lambda: None  # type: ignore[attr-defined,method-assign]
    loop = asyncio.get_running_loop()
    workers = service.services.workers

    def stop() -> None:
        server.should_exit = True
        workers.closing.set()  # the long polls answer 204 now, not at their waitSeconds

    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(sig, stop)
    queues = ("pipelines", "default")
    async with contextlib.AsyncExitStack() as stack:
        if worker:
            await stack.enter_async_context(engine.worker(concurrency=concurrency, queues=queues))
        stack.push_async_callback(service.mcp.close)  # the /mcp sessions, if an assistant opened any
        if own_process:
            stack.enter_context(tuned_collector())
        # an inherited socket (its family and address read from it), or one bound here
        sockets = [socket.socket(fileno=fd)] if fd is not None else None
        task = asyncio.create_task(server.serve(sockets=sockets))
        while not server.started and not task.done():
            await asyncio.sleep(0.01)
        if server.started:
            bound = port
            for s in server.servers:
                for sock in s.sockets:
                    bound = sock.getsockname()[1]
            (announce or _print)(f"listening on http://{host}:{bound}")
            # pipelines of an older release become the decider's now, not at their first request
            upgrading = asyncio.create_task(_upgrade(service.services.pipelines))
        await task
        if server.started and not upgrading.done():
            upgrading.cancel()


def _print(line: str) -> None:
    print(line, flush=True)
    sys.stdout.flush()


async def _upgrade(pipelines: Any) -> None:
    try:
        await pipelines.upgrade()
    except Exception:  # noqa: BLE001 - the first use of the service tries it again
        logging.getLogger("flowli.serve").exception("the upgrade of the pipelines of an older release failed")
