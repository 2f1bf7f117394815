"""A worker process that starts an execution itself, for the crash tests of direct starts:

    python tests/crash/start_and_work.py DB_URL WORK_DIR --names s0 s1 s2 --hold-at s1 --eid-file FILE

It opens an engine, runs a worker in it, and once that worker takes work it starts a
``crash.steps`` execution: a start in a process with a free worker slot is direct (the record is
created leased to this process, with no START task) and runs here at once. It writes the eid to
``--eid-file`` (and prints it), then runs until it is killed. It logs to its stderr.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import sys
from datetime import timedelta
from pathlib import Path

import flowli

# the workflows: app.py of this script's folder
sys.path.insert(0, str(Path(__file__).resolve().parent))
from app import registry  # noqa: E402


def parse(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("url")
    p.add_argument("work_dir")
    p.add_argument("--names", nargs="+", required=True)
    p.add_argument("--hold-at", default=None)
    p.add_argument("--hold-seconds", type=float, default=30.0)
    p.add_argument("--eid-file", required=True)
    p.add_argument("--lease-ttl", type=float, default=1.5)
    p.add_argument("--task-ttl", type=float, default=1.5)
    p.add_argument("--sweep-interval", type=float, default=0.2)
    p.add_argument("--poll-interval", type=float, default=0.05)
    return p.parse_args(argv)


async def run(args: argparse.Namespace) -> None:
    engine = await flowli.connect(
        args.url,
        registry,
        lease_ttl=timedelta(seconds=args.lease_ttl),
        task_ttl=timedelta(seconds=args.task_ttl),
        sweep_interval=args.sweep_interval,
        poll_interval=args.poll_interval,
    )
    async with engine:
        worker = asyncio.create_task(engine.run_worker(concurrency=8), name="start-and-work-worker")
        # the worker writes its row as it begins to run, when it takes direct starts already
        while not [w for w in await engine.workers() if w["id"].startswith(engine.owner)]:
            if worker.done():
                await worker  # it failed: raise its error
            await asyncio.sleep(0.01)
        eid = await engine.start(
            "crash.steps", args.work_dir, args.names, args.hold_at, args.hold_seconds, by="crash-test@example.com"
        )
        tmp = Path(args.eid_file + ".tmp")
        await asyncio.to_thread(tmp.write_text, eid)
        await asyncio.to_thread(os.replace, tmp, args.eid_file)  # the test never reads half an eid
        print(eid, flush=True)
        logging.getLogger("crash.start_and_work").info("started %s", eid)
        await worker


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
