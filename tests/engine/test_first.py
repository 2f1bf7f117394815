"""``ctx.first``: of several waiting frames, the one whose outcome the journal holds first. A
workflow that handles one event at a time with it (answers of delegates and messages, in any
order of arrival) replays to the same decisions, so its journal never diverges."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from flowli import Context, Registry
from flowli.domain import EntryKind

from ..crash import until

pytestmark = pytest.mark.integration

QUEUE = "reviewers"


def note(event: str) -> str:
    return event


def app() -> Registry:
    registry = Registry()

    @registry.workflow("events")
    async def events(ctx: Context, names: list[str]) -> Any:
        """Delegate one task per name and handle answers and 'stop' messages one at a time; each
        answer of "more" delegates one more task: the frames created depend on the order seen."""
        waiting = {ctx.delegate(QUEUE, {"name": n}, key=n): n for n in names}
        control = ctx.receive("control")
        seen: list[str] = []

        async def handled(event: str) -> None:
            # an unkeyed frame per event: a replay that took the events in another order would
            # meet these frames with other arguments (a divergence)
            seen.append(await ctx.step(note, event))

        while waiting:
            frame = await ctx.first([*waiting, control])
            if frame is control:
                await handled(f"message:{await frame}")
                control = ctx.receive("control")
                continue
            name = waiting.pop(frame)
            value = await frame
            await handled(f"{name}={value}")
            if value == "more":
                waiting[ctx.delegate(QUEUE, {"name": f"{name}+"}, key=f"{name}+")] = f"{name}+"
        return seen

    @registry.workflow("timer_or_message")
    async def timer_or_message(ctx: Context) -> Any:
        timer = ctx.sleep(timedelta(seconds=60))
        message = ctx.receive("go")
        frame = await ctx.first([timer, message])
        return "timer" if frame is timer else await frame

    @registry.workflow("first_of_nothing")
    async def first_of_nothing(ctx: Context) -> Any:
        return await ctx.first([])

    return registry


async def _tasks(engine: Any, eid: str, n: int) -> list[Any]:
    async def there() -> Any:
        tasks = [t for t in await engine.tasks(eid=eid) if t.state == "ready"]
        return tasks if len(tasks) >= n else None

    return await until(there, 40, f"{n} open tasks of {eid}")


async def test_events_are_handled_in_the_journal_order_and_a_replay_agrees(open_engine):
    async with open_engine(app()) as engine:
        eid = await engine.start("events", ["a", "b", "c"])
        await _tasks(engine, eid, 3)
        bot = engine.consumer(QUEUE, "bot", lease=timedelta(seconds=30))
        tasks = {t.payload["name"]: t for t in await bot.dequeue(limit=3)}
        # c first, then a message, then b ("more": a new frame), then a, then the new one
        await bot.answer(tasks["c"], "ok")
        await engine.signal(eid, "control", "pause")
        await bot.answer(tasks["b"], "more")
        await bot.answer(tasks["a"], "ok")
        [extra] = await until(lambda: bot.dequeue(), 40, "the task of b+")
        await bot.answer(extra, "done")
        result = await engine.result(eid, timeout=30)
        assert sorted(result) == sorted(["c=ok", "message:pause", "b=more", "a=ok", "b+=done"])
        assert result.index("b=more") < result.index("b+=done")
        # a replay of the whole journal takes the events in the same order: the same frames
        assert await engine.replays(eid) is None
        journal = await engine.journal(eid)
        steps = [e.value for e in journal if e.kind is EntryKind.FRAME_COMPLETED and e.fid.startswith("root/note")]
        assert steps == result


async def test_several_outcomes_present_at_once_are_taken_in_journal_order(open_engine):
    """All answers arrive while the execution is suspended: the next activation sees them together
    and must take them in the order they were recorded, not the order of the code."""
    async with open_engine(app()) as engine:
        eid = await engine.start("events", ["a", "b", "c", "d"])
        await _tasks(engine, eid, 4)
        bot = engine.consumer(QUEUE, "bot", lease=timedelta(seconds=30))
        tasks = {t.payload["name"]: t for t in await bot.dequeue(limit=4)}
        for name in ["d", "b", "a", "c"]:
            await bot.answer(tasks[name], "ok")
        assert await engine.result(eid, timeout=30) == ["d=ok", "b=ok", "a=ok", "c=ok"]
        assert await engine.replays(eid) is None


async def test_a_timer_and_a_message_whichever_is_recorded_first(open_engine):
    from flowli.testing import Clock

    clock = Clock()
    async with open_engine(app(), clock=clock) as engine:
        by_message = await engine.start("timer_or_message")
        by_timer = await engine.start("timer_or_message")
        await engine.wait_suspended(by_message)
        await engine.wait_suspended(by_timer)
        await engine.signal(by_message, "go", "hello")
        assert await engine.result(by_message, timeout=30) == "hello"
        await clock.advance(timedelta(seconds=61))
        assert await engine.result(by_timer, timeout=30) == "timer"


async def test_first_of_no_frames_is_refused(open_engine):
    async with open_engine(app()) as engine:
        eid = await engine.start("first_of_nothing")
        with pytest.raises(Exception, match="ctx.first takes at least one frame"):
            await engine.result(eid, timeout=30)
