"""Patterns: functions written on the Context API only. The engine does not know them.

``delegate``  puts a task on a queue, waits for the answer on a channel
``review``    a delegate to a human queue, plus the announcements of the inbox (``inbox``,
              ``answer_review``: the projector of the review inbox, registered by this package)
``saga``      runs actions in order, undoes the completed ones in reverse on a failure
``fan_out``   one child execution per item, results in item order
``on_tick``   one execution per tick of a schedule, exactly once

Write your own the same way.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Any

from flowli.domain import RetryPolicy, StepFailed
from flowli.engine import Context

from ._inbox import REVIEWS, Review, answer_review, inbox

__all__ = ["Action", "REVIEWS", "REVIEW_QUEUE", "Review", "answer_review", "delegate", "fan_out", "inbox", "on_tick",
           "review", "saga"]

REVIEW_QUEUE = "humans"


async def delegate(
    ctx: Context, queue: str, payload: Any, *, key: str | None = None, retry: RetryPolicy | None = None,
    timeout: timedelta | None = None,
) -> Any:
    """Put a DELEGATE task on ``queue`` and wait, holding no worker, for its answer.

    A consumer outside the engine (``engine.consumer(queue, name)``) dequeues the task, renews its
    lease while it works, and answers or fails it; the answer is what ``delegate`` returns. This is
    ``ctx.delegate``: its attempts, retries, lease expiries and timeout are the frame's.

    >>> async def approval(ctx, invoice):
    ...     answer = await delegate(ctx, "finance-bot", {"check": invoice}, key="check")
    ...     return answer["ok"]
    """
    return await ctx.delegate(queue, payload, key=key, retry=retry, timeout=timeout)


async def review(
    ctx: Context, subject: str, data: Any = None, *, queue: str = REVIEW_QUEUE, key: str | None = None,
    timeout: timedelta | None = None,
) -> dict[str, Any]:
    """Ask a person: a delegate to a human queue, announced to the review inbox.

    Returns the answer, e.g. ``{"approved": True, "reason": "…", "by": "carol@example.com"}``;
    ``flowli review EID --approve --by carol@example.com`` gives it from the command line.

    >>> async def expense(ctx, claim):
    ...     decision = await review(ctx, f"expense {claim['id']}", claim)
    ...     return "paid" if decision["approved"] else "refused"
    """
    with ctx.group(f"review {subject}"):
        pending = ctx.delegate(queue, {"review": subject, "data": data}, key=key, timeout=timeout)
        frame = getattr(pending, "fid", None)  # the frame id is known once the frame is created
        await ctx.announce("review.opened", {"frame": frame, "subject": subject, "data": data, "queue": queue})
        try:
            answer = await pending
        except TimeoutError:
            await ctx.announce("review.closed", {"frame": frame, "answer": None, "timeout": True})
            raise
        await ctx.announce("review.closed", {"frame": frame, "answer": answer})
    return answer  # type: ignore[no-any-return]


@dataclass(frozen=True)
class Action:
    """One action of a saga: ``do(*args)``, and ``undo(value of do)`` if a later action fails."""

    do: Callable[..., Any]
    args: Sequence[Any] = ()
    undo: Callable[..., Any] | None = None
    key: str | None = None
    """The frame key of ``do`` (the undo's is ``undo-{key}``); default: the action's index."""
    retry: RetryPolicy | None = None
    undo_retry: RetryPolicy = field(default_factory=lambda: RetryPolicy(max_attempts=10, backoff=timedelta(seconds=1)))
    """Compensation must finish: it retries by default."""


async def saga(ctx: Context, actions: Sequence[Action]) -> list[Any]:
    """Run the actions in order; when one fails, undo the completed ones in reverse order, then
    raise the failure. Each do and each undo is a step: a replay after a crash runs neither
    again, so every compensation runs once.

    >>> async def book_trip(ctx, trip):
    ...     return await saga(ctx, [
    ...         Action(reserve_flight, (trip,), undo=cancel_flight),
    ...         Action(reserve_hotel, (trip,), undo=cancel_hotel),
    ...         Action(charge_card, (trip,), undo=refund),
    ...     ])
    """
    done: list[tuple[int, Action, Any]] = []
    with ctx.group("saga"):
        for i, action in enumerate(actions):
            key = action.key or str(i)
            try:
                value = await ctx.step(action.do, *action.args, key=key, retry=action.retry)
            except StepFailed:
                for j, undone, undo_value in reversed(done):
                    assert undone.undo is not None
                    await ctx.step(undone.undo, undo_value, key=f"undo-{undone.key or str(j)}", retry=undone.undo_retry)
                raise
            if action.undo is not None:
                done.append((i, action, value))
    return [v for _, _, v in done]


async def fan_out(ctx: Context, workflow: str | Callable[..., Any], items: Sequence[Any]) -> list[Any]:
    """One child execution per item, run at the same time; the results in item order.

    >>> async def resize_all(ctx, images):
    ...     return await fan_out(ctx, "resize", images)
    """
    with ctx.group("fan_out"):
        children = [ctx.child(workflow, item, key=str(i)) for i, item in enumerate(items)]
    return await ctx.gather(*children)


async def on_tick(
    ctx: Context,
    workflow: str | Callable[..., Any],
    *,
    every: timedelta,
    schedule: str,
    start: datetime | None = None,
    ticks: int,
) -> list[str]:
    """Run ``workflow(tick)`` once per tick of a schedule, ``ticks`` times, every ``every``.

    Ticks fall on a grid: ``start`` plus multiples of ``every``; without ``start``, multiples of
    ``every`` since the UNIX epoch, from the next one on. The tick's instant (ISO text) is the
    child's argument. Several executions of one schedule (say, one started by each worker
    process) run each tick once: before it starts a tick's child, an execution claims
    ``{schedule}@{tick}`` (put-if-absent; exactly one caller wins). Returns the ticks this
    execution ran.

    >>> async def nightly(ctx):
    ...     await on_tick(ctx, "report", every=timedelta(days=1), schedule="nightly", ticks=7)
    """
    if start is None:
        now = await ctx.now()
        epoch = datetime(1970, 1, 1, tzinfo=timezone.utc)
        steps = -((epoch - now) // every)  # ceil((now - epoch) / every)
        start = epoch + steps * every
    first = start
    mine: list[str] = []
    children = []
    for n in range(ticks):
        tick = first + n * every
        await ctx.sleep_until(tick)
        stamp = tick.isoformat()
        if await ctx.claim(f"{schedule}@{stamp}"):
            children.append(ctx.child(workflow, stamp, key=f"{schedule}@{stamp}"))
            mine.append(stamp)
    await ctx.gather(*children)
    return mine
