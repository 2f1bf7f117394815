"""The threads that run plain step functions: outcomes, context, and more calls than threads."""

from __future__ import annotations

import asyncio
import contextvars
import threading

import pytest

from flowli.engine._threads import StepThreads  # private: the pool's own test; the engine runs plain steps on it

pytestmark = pytest.mark.unit

who: contextvars.ContextVar[str] = contextvars.ContextVar("who", default="nobody")


def _value_and_context(x: int) -> tuple[int, str, str]:
    return x * 2, who.get(), threading.current_thread().name


def _boom() -> None:
    raise ValueError("boom in a thread")


async def test_a_value_an_error_and_the_callers_context_come_back() -> None:
    threads = StepThreads(max_threads=2)
    who.set("alice@example.com")
    value, seen, name = await threads.run(_value_and_context, (21,), {})
    assert (value, seen) == (42, "alice@example.com")
    assert name.startswith("flowli-step-") and name != threading.current_thread().name
    with pytest.raises(ValueError, match="boom in a thread"):
        await threads.run(_boom, (), {})


async def test_more_calls_than_threads_all_complete_and_never_exceed_the_cap() -> None:
    before = set(threading.enumerate())
    threads = StepThreads(max_threads=3)
    running = 0
    most = 0
    lock = threading.Lock()
    gate = threading.Event()

    def hold(i: int) -> int:
        nonlocal running, most
        with lock:
            running += 1
            most = max(most, running)
        gate.wait(5)
        with lock:
            running -= 1
        return i

    calls = [threads.run(hold, (i,), {}) for i in range(20)]
    for _ in range(500):  # until the three threads hold a call each (bounded)
        if running == 3:
            break
        await asyncio.sleep(0.01)
    await asyncio.sleep(0.05)  # a fourth thread, if the cap did not hold, would be running by now
    gate.set()
    assert await asyncio.gather(*calls) == list(range(20))
    assert most == 3
    started = [t for t in threading.enumerate() if t not in before and t.name.startswith("flowli-step-")]
    assert len(started) == 3  # the pool's threads (they serve it for good) and no more
