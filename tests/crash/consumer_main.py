"""A consumer process for the crash tests: it dequeues one DELEGATE task, writes its id to a
file, and holds it without an answer until it is killed.

    python tests/crash/consumer_main.py DB_URL QUEUE HELD_FILE [--lease SECONDS]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from datetime import timedelta
from pathlib import Path

import flowli


async def run(args: argparse.Namespace) -> None:
    engine = await flowli.connect(args.url, flowli.Registry())
    async with engine:
        consumer = engine.consumer(args.queue, f"consumer-{os.getpid()}", lease=timedelta(seconds=args.lease))
        while True:
            tasks = await consumer.dequeue(limit=1)
            if tasks:
                break
            await asyncio.sleep(0.05)
        tmp = Path(args.held + ".tmp")
        tmp.write_text(f"{tasks[0].id}\n{tasks[0].attempt}\n")
        os.replace(tmp, args.held)
        await asyncio.Event().wait()  # works on it forever: the test kills it


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("url")
    p.add_argument("queue")
    p.add_argument("held")
    p.add_argument("--lease", type=float, default=1.5)
    asyncio.run(run(p.parse_args(sys.argv[1:])))


if __name__ == "__main__":
    main()
