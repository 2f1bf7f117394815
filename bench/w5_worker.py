"""A worker process of W5: ``python -m bench.w5_worker URL --ready FILE [--concurrency 64]``.

Opens an engine on ``URL`` with the bench's registry, writes its pid to ``FILE`` once the engine
is open, and runs ``engine.run_worker()`` until SIGTERM or SIGINT (a clean stop: the worker hands
back what it holds) or SIGKILL (what the kill variant of W5 does).
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
import sys
from datetime import timedelta
from pathlib import Path

import flowli

from .workloads import registry


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench.w5_worker")
    p.add_argument("url")
    p.add_argument("--ready", required=True, help="file to write the pid to once the engine is open")
    p.add_argument("--concurrency", type=int, default=64)
    p.add_argument("--ttl", type=float, default=None,
                   help="lease_ttl and task_ttl in seconds (default: the engine's, as shipped)")
    return p.parse_args(argv)


def _ready(path: str) -> None:
    Path(path).write_text(str(os.getpid()))


async def serve(args: argparse.Namespace) -> None:
    tuning = {}
    if args.ttl is not None:
        tuning = {"lease_ttl": timedelta(seconds=args.ttl), "task_ttl": timedelta(seconds=args.ttl)}
    engine = await flowli.connect(args.url, registry, **tuning)
    async with engine:
        worker = asyncio.create_task(engine.run_worker(concurrency=args.concurrency), name="bench-w5-worker")
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, worker.cancel)
        _ready(args.ready)
        await asyncio.wait([worker])
        if not worker.cancelled() and worker.exception() is not None:
            raise worker.exception()  # type: ignore[misc]


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(process)d %(name)s %(levelname)s %(message)s")
    asyncio.run(serve(parse_args(argv)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
