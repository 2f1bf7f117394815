"""A worker process for the crash tests: ``python worker_main.py URL KEY MARKER MODE``.
MODE ``hang``: the handler writes its job to MARKER and never returns (the test SIGKILLs it);
MODE ``work``: it answers every job with "done by <pid>"."""

from __future__ import annotations

import asyncio
import json
import os
import sys

from flowli.client import HttpWorker


async def main(url: str, key: str, marker: str, mode: str) -> None:
    worker = HttpWorker(url, key, f"{mode}-{os.getpid()}", wait_seconds=2)

    @worker.handler("Slow")
    async def slow(job: dict) -> str:
        if mode == "hang":
            with open(marker, "w") as f:
                json.dump({"job": job, "session": worker.session}, f)
            await asyncio.sleep(3600)
        return f"done by {os.getpid()}"

    await worker.run(concurrency=8)


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:5]))
