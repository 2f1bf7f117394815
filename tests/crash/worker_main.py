"""One worker process for the crash tests, run until it is killed:

    python tests/crash/worker_main.py DB_URL [--lease-ttl 1.5] [--ready FILE] ...

It logs to its stderr (the tests read it) and, with ``--ready``, writes its pid to FILE once
its engine is open.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import sys
from datetime import timedelta
from pathlib import Path
from typing import Any

import flowli

# the workflows: app.py of this script's folder, or of the folder FLOWLI_TEST_APP_DIR names
sys.path.insert(0, os.environ.get("FLOWLI_TEST_APP_DIR") or str(Path(__file__).resolve().parent))
from app import registry  # noqa: E402


def parse(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("url")
    p.add_argument("--lease-ttl", type=float, default=1.5)
    p.add_argument("--task-ttl", type=float, default=1.5)
    p.add_argument("--sweep-interval", type=float, default=0.2)
    p.add_argument("--poll-interval", type=float, default=0.05)
    p.add_argument("--repair-grace", type=float, default=1.0)
    p.add_argument("--concurrency", type=int, default=64)
    p.add_argument("--ready", default=None)
    p.add_argument("--spans", default=None, help="trace: write each span as a JSON line to this file")
    return p.parse_args(argv)


def trace_to(path: str) -> None:
    """OpenTelemetry's global tracer provider, each span written to ``path`` as it ends (a line
    of JSON, flushed: a SIGKILL loses only the spans that had not ended)."""
    import json

    from opentelemetry import trace
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import ConsoleSpanExporter, SimpleSpanProcessor

    def line(span: Any) -> str:
        ctx, parent = span.get_span_context(), span.parent
        return json.dumps({"name": span.name, "trace_id": ctx.trace_id, "span_id": ctx.span_id,
                           "parent_id": parent.span_id if parent else None, "attributes": dict(span.attributes),
                           "pid": os.getpid()}) + "\n"

    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(ConsoleSpanExporter(out=open(path, "a"), formatter=line)))
    trace.set_tracer_provider(provider)


async def run(args: argparse.Namespace) -> None:
    if args.spans:
        trace_to(args.spans)
    engine = await flowli.connect(
        args.url,
        registry,
        lease_ttl=timedelta(seconds=args.lease_ttl),
        task_ttl=timedelta(seconds=args.task_ttl),
        sweep_interval=args.sweep_interval,
        poll_interval=args.poll_interval,
        repair_grace=timedelta(seconds=args.repair_grace),
    )
    async with engine:
        logging.getLogger("crash.worker").info("worker ready on %s", args.url)
        if args.ready:
            await asyncio.to_thread(Path(args.ready).write_text, str(os.getpid()))
        await engine.run_worker(concurrency=args.concurrency)


def main() -> None:
    args = parse(sys.argv[1:])
    logging.basicConfig(
        level=logging.INFO,
        stream=sys.stderr,
        format=f"%(asctime)s pid={os.getpid()} %(name)s %(levelname)s %(message)s",
    )
    asyncio.run(run(args))


if __name__ == "__main__":
    main()
