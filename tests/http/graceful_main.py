"""A worker process for the stop tests: ``python graceful_main.py URL KEY HANDLER MARKER SECONDS GRACE``.
Its handler writes MARKER when a job starts, then works SECONDS and answers "finished by <pid>";
the worker leaves running jobs GRACE seconds when it is stopped (SIGTERM, Ctrl-C)."""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path

from flowli.client import HttpWorker


async def main(url: str, key: str, handler: str, marker: str, seconds: str, grace: str) -> None:
    worker = HttpWorker(url, key, f"graceful-{os.getpid()}", wait_seconds=2)

    @worker.handler(handler)
    async def work(job: dict) -> str:
        Path(marker).write_text(str(job["stageId"]))
        await asyncio.sleep(float(seconds))
        return f"finished by {os.getpid()}"

    await worker.run(concurrency=2, grace=float(grace))


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:7]))
