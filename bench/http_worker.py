"""The HttpWorker process of the HTTP workloads: ``python -m bench.http_worker URL KEY CONCURRENCY
[reference]`` (``reference``: the reference routes only, not the batch routes the service offers)."""

from __future__ import annotations

import asyncio
import sys
from typing import Any

from flowli.client import HttpWorker


async def main(url: str, key: str, concurrency: int, batch: bool = True) -> None:
    worker = HttpWorker(url, key, "bench", wait_seconds=20, batch=batch)

    def echo(job: dict[str, Any]) -> str:
        return job["input"] or job["prevStageOutput"] or "ok"

    for name in ("BenchHandler", "LoadInvoiceHandler", "EmailInvoiceHandler", "ArchiveInvoiceHandler"):
        worker.handler(name)(echo)
    await worker.run(concurrency=concurrency)


if __name__ == "__main__":
    try:  # the loop an application worker would pick for speed; the standard one without it
        import uvloop
        factory: Any = uvloop.new_event_loop
    except ImportError:
        factory = None
    with asyncio.Runner(loop_factory=factory) as runner:
        runner.run(main(sys.argv[1], sys.argv[2], int(sys.argv[3]), batch=sys.argv[4:5] != ["reference"]))
