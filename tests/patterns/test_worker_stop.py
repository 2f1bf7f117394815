"""A worker block that ends right after it gave the worker work must end: its worker stops.

(Found while testing the patterns, whose tests open and close worker blocks around starts; it
belongs with the engine's tests.) On Python 3.11, ``asyncio.wait_for`` returns the result of the
awaited future instead of raising when the cancellation of the waiting task arrives after that
future completed; the worker's idle wait for ``rt.wakeups.work`` is such a wait_for, so a stop that
arrives just after an in-process enqueue is swallowed and the worker runs on for ever.
"""

from __future__ import annotations

import asyncio

import pytest

from flowli import Context, Engine, Registry

pytestmark = pytest.mark.integration

ATTEMPTS = 30


async def force_stop(engine: Engine, block: asyncio.Future[None]) -> None:
    """Stop the workers that ignored their stop (so that the test ends), then the block: the
    tasks that run them, by the name ``engine.worker`` gives them."""
    for _ in range(500):
        running = [t for t in asyncio.all_tasks() if t.get_name() == "flowli-worker" and not t.done()]
        if not running:
            break
        for t in running:
            t.cancel()
        await asyncio.sleep(0.01)
    await asyncio.wait({block}, timeout=10)


async def test_a_worker_block_that_starts_an_execution_and_ends_at_once_stops_its_worker(open_engine):
    registry = Registry()

    @registry.workflow("noop")
    async def noop(ctx: Context) -> None:
        return None

    async with open_engine(registry, worker=False) as engine:
        for attempt in range(ATTEMPTS):

            async def block() -> None:
                async with engine.worker(concurrency=4):
                    await asyncio.sleep(0.1)  # the worker idles: it waits for work
                    await engine.start("noop")  # an in-process enqueue wakes it; the block ends

            running = asyncio.ensure_future(block())
            done, _ = await asyncio.wait({running}, timeout=10)
            if running not in done:
                await force_stop(engine, running)
                pytest.fail(f"attempt {attempt + 1} of {ATTEMPTS}: the worker block did not end within 10 s"
                            " (its worker ignored the stop)")
            running.result()
