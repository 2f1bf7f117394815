"""The threads that run plain (``def``) step functions off the event loop.

``asyncio.to_thread`` goes through ``concurrent.futures`` (a Future with a Condition per call, a
work item, a semaphore, a chained asyncio future) and wakes the loop once per call. A step runs
on every frame of a busy worker, so this pool does less: one queue, a thread taken from the idle
ones or started up to ``MAX_THREADS``, the function run in a copy of the caller's context (the
evidence logger reads it), and the outcomes handed back in bunches: a finished step rings the
loop only when no earlier outcome is waiting to be collected.
"""

from __future__ import annotations

import asyncio
import contextvars
import queue
import threading
from typing import Any, Callable

MAX_THREADS = 32
"""Plain step functions running at once in one process at most (as many as asyncio's default)."""

_Outcome = tuple[asyncio.Future[Any], Any, BaseException | None]


class StepThreads:
    def __init__(self, max_threads: int = MAX_THREADS):
        self.max_threads = max_threads
        self._work: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._threads = 0
        self._idle = 0
        self._done: dict[asyncio.AbstractEventLoop, list[_Outcome]] = {}

    def run(self, fn: Callable[..., Any], args: Any, kwargs: dict[str, Any]) -> asyncio.Future[Any]:
        """Run ``fn(*args, **kwargs)`` in a thread; the future resolves on the calling loop."""
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[Any] = loop.create_future()
        ctx = contextvars.copy_context()
        with self._lock:
            start = self._idle <= 0 and self._threads < self.max_threads
            if start:
                self._threads += 1
            else:
                self._idle -= 1  # taken (or queued behind busy threads when none is idle)
        self._work.put((fn, args, kwargs, ctx, fut, loop))
        if start:
            threading.Thread(target=self._serve, name=f"flowli-step-{self._threads}", daemon=True).start()
        return fut

    def _serve(self) -> None:
        while True:
            fn, args, kwargs, ctx, fut, loop = self._work.get()
            try:
                result, exc = ctx.run(fn, *args, **kwargs), None
            except BaseException as e:  # delivered to the awaiting frame
                result, exc = None, e
            outcome = (fut, result, exc)
            del fn, args, kwargs, ctx, fut, result, exc  # before the loop may take the outcome
            with self._lock:
                pending = self._done.setdefault(loop, [])
                pending.append(outcome)
                ring = len(pending) == 1
                self._idle += 1
            del outcome
            if ring:
                try:
                    loop.call_soon_threadsafe(self._collect, loop)
                except RuntimeError:  # the loop is closed: nobody waits any more
                    with self._lock:
                        self._done.pop(loop, None)

    def _collect(self, loop: asyncio.AbstractEventLoop) -> None:
        with self._lock:
            outcomes = self._done.pop(loop, [])
        for fut, result, exc in outcomes:
            if fut.done():
                continue
            if exc is not None:
                fut.set_exception(exc)
            else:
                fut.set_result(result)


STEP_THREADS = StepThreads()
