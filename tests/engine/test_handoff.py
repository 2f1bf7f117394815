"""Hand-offs: a delegation made while a consumer of this process long-polls its queue is written
leased to that consumer and returned by its poll, without a dequeue; a poll of another queue or
another application is not handed it; a poll that went away before the hand-off completed gives
the task back to the queue at once."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

import pytest

from flowli import Context, Registry
from flowli.domain import TaskKind, task_id
from flowli.engine.deciders import Answered, Complete, Delegate, Event, Start
from flowli.testing import store_of

from ..crash import until

pytestmark = pytest.mark.integration

QUEUE = "approvers"
LEASE = timedelta(seconds=30)


def app() -> Registry:
    registry = Registry()

    @registry.workflow("approve")
    async def approve(ctx: Context, what: str) -> Any:
        return await ctx.delegate(QUEUE, {"what": what}, key="decision")

    return registry


def attempt_of(eid: str) -> str:
    return task_id(TaskKind.DELEGATE, eid, "root/delegate:decision@1")


def waiting_polls(engine: Any) -> list[Any]:
    """The long polls of the engine's consumers that wait for a task now, oldest first."""
    return engine._rt.polls._waiting  # private: the hand-off's poll registry, the mechanism under test; not a read a user needs


def count_dequeues(engine: Any) -> list[int]:
    """A one-item list that counts the DELEGATE tasks the store hands out by a dequeue from now on."""
    dequeued = [0]
    store = store_of(engine)
    real = store.dequeue

    async def counting(*args: Any, **kwargs: Any) -> Any:
        found = await real(*args, **kwargs)
        dequeued[0] += sum(1 for t in found if t.kind is TaskKind.DELEGATE)
        return found

    store.dequeue = counting  # type: ignore[method-assign]  # the store's dequeue, counted: what the hand-off avoids
    return dequeued


async def polling(engine: Any, n: int = 1) -> None:
    await until(lambda: len(waiting_polls(engine)) >= n, 30, f"{n} long poll(s) waiting")


async def test_a_waiting_long_poll_is_handed_the_delegation_leased_to_it(open_engine):
    # a long poll interval: the poll waits in one piece, so only a hand-off (or a dequeue after a
    # wake-up) can give it the task, however slow the machine is
    async with open_engine(app(), poll_interval=30.0) as engine:
        clerk = engine.consumer(QUEUE, "clerk", lease=LEASE)
        poll = asyncio.ensure_future(clerk.dequeue(1, wait=20))
        await polling(engine)
        dequeued = count_dequeues(engine)
        eid = await engine.start("approve", "invoice 7")
        [task] = await asyncio.wait_for(poll, 20)
        assert dequeued == [0]  # handed, not dequeued
        assert (task.id, task.lease_owner, task.deliveries, task.payload) == (attempt_of(eid), "clerk", 1, {"what": "invoice 7"})
        stored = await engine.task(task.id)
        assert (stored.lease_owner, stored.deliveries, stored.state) == ("clerk", 1, "ready")
        assert stored.visible_at > engine.clock.now() + LEASE / 2  # leased for the consumer's lease
        assert waiting_polls(engine) == []
        await clerk.answer(task, "approved")
        assert await engine.result(eid, timeout=30) == "approved"


async def test_a_poll_of_another_queue_or_application_is_not_handed_the_task(open_engine):
    async with open_engine(app()) as engine:
        elsewhere = engine.consumer("other", "o", lease=LEASE)
        tenant = engine.consumer(QUEUE, "t", lease=LEASE, application="acme")
        polls = [asyncio.ensure_future(elsewhere.dequeue(1, wait=2)), asyncio.ensure_future(tenant.dequeue(1, wait=2))]
        await polling(engine, 2)
        eid = await engine.start("approve", "invoice 8")  # single-tenant: application None
        assert await asyncio.gather(*polls) == [[], []]
        stored = await engine.task(attempt_of(eid))
        assert stored.lease_owner is None and stored.state == "ready"  # on the queue, for the next poll
        [task] = await engine.consumer(QUEUE, "clerk", lease=LEASE).dequeue(1, wait=5)
        assert task.id == attempt_of(eid)


async def test_a_poll_that_went_away_before_the_hand_off_gives_the_task_back(open_engine):
    # a long poll interval: the poll waits in one piece (else, on a busy machine, it times out and
    # waits again as another poll before the delegation, and the one watched here is never handed it)
    async with open_engine(app(), poll_interval=30.0) as engine:
        clerk = engine.consumer(QUEUE, "clerk", lease=LEASE)
        poll = asyncio.ensure_future(clerk.dequeue(1, wait=20))
        await polling(engine)
        [waiting] = waiting_polls(engine)
        store = store_of(engine)
        real = store.write

        async def poll_leaves_first(write: Any, now: Any) -> Any:
            if any(t.kind is TaskKind.DELEGATE for t in write.tasks):
                poll.cancel()  # the HTTP client hung up while the delegation was being written
                await asyncio.sleep(0)
            return await real(write, now)

        store.write = poll_leaves_first  # type: ignore[method-assign]
        eid = await engine.start("approve", "invoice 9")

        async def given_back() -> bool:
            t = await engine.task(attempt_of(eid))
            return t is not None and t.lease_owner is None

        # the task is ready (no owner) from its write until the hand-off: wait for the hand-off first
        await until(lambda: waiting.matched, 30, "the hand-off to the poll that went away")
        await until(given_back, 30, "the task given back to the queue")
        assert poll.cancelled()
        store.write = real  # type: ignore[method-assign]
        [task] = await engine.consumer(QUEUE, "second", lease=LEASE).dequeue(1, wait=5)
        assert task.id == attempt_of(eid)  # at once, not after the first lease ran out
        await engine.consumer(QUEUE, "second", lease=LEASE).answer(task, "approved")
        assert await engine.result(eid, timeout=30) == "approved"


def pair() -> Registry:
    """A decider that delegates one piece of work at its start and a second once the first is answered."""
    registry = Registry()

    def decide(state: Any, command: Any) -> Any:
        if isinstance(command, Start):
            return [Event("asked", {"asked": 1})], [Delegate("first", QUEUE, {"what": "first"})]
        if isinstance(command, Answered) and command.key == "first":
            return [Event("asked", {"asked": 2})], [Delegate("second", QUEUE, {"what": "second"})]
        if isinstance(command, Answered):
            return [Event("done", {})], [Complete(command.value)]
        return [], []

    registry.decider("pair", initial={}, evolve=lambda state, event: {**state, **event.data})(decide)
    return registry


async def test_a_deciders_delegations_are_handed_to_a_waiting_poll(open_engine):
    """A decider's Delegate, decided in its start's write or in an answer's, reaches a long poll of
    this process leased to it, with no dequeue: the write that creates the task hands it."""
    async with open_engine(pair(), poll_interval=30.0, worker=False) as engine:
        clerk = engine.consumer(QUEUE, "clerk", lease=LEASE)
        dequeued = count_dequeues(engine)
        poll = asyncio.ensure_future(clerk.dequeue(1, wait=20))
        await polling(engine)
        eid = await engine.start("pair")
        [first] = await asyncio.wait_for(poll, 20)
        assert (first.lease_owner, first.payload) == ("clerk", {"what": "first"})
        assert (await engine.task(first.id)).lease_owner == "clerk"
        poll = asyncio.ensure_future(clerk.dequeue(1, wait=20))
        await polling(engine)
        await clerk.answer(first, "one")
        [second] = await asyncio.wait_for(poll, 20)
        assert (second.lease_owner, second.payload) == ("clerk", {"what": "second"})
        assert dequeued == [0]  # both handed, none dequeued
        await clerk.answer(second, "two")
        assert await engine.result(eid, timeout=30) == "two"


async def test_a_hand_off_whose_write_raised_after_it_was_stored_goes_back_to_the_queue(open_engine):
    """A write that raises after the store committed it (here a middleware that fails once the
    write is done; a cancel while the write commits is the same case) may have stored its task
    leased to the waiting poll, which is told nothing: the task goes back to its queue at once and
    the poll gets it, rather than nobody working it until its lease runs out."""
    async with open_engine(pair(), poll_interval=30.0, worker=False) as engine:
        async def fails_after_the_write(transition: Any, call_next: Any) -> Any:
            await call_next()
            raise RuntimeError("the caller lost the answer")

        engine.use(fails_after_the_write, kinds=["start"])
        clerk = engine.consumer(QUEUE, "clerk", lease=LEASE)
        poll = asyncio.ensure_future(clerk.dequeue(1, wait=20))
        await polling(engine)
        with pytest.raises(RuntimeError, match="lost the answer"):
            await engine.start("pair")
        # the poll's own wait is 20 s and its interval 30: only the task given back wakes it sooner
        [first] = await asyncio.wait_for(poll, 10)
        assert (first.lease_owner, first.payload) == ("clerk", {"what": "first"})
        assert (await engine.task(first.id)).lease_owner == "clerk"


async def test_a_write_refused_before_the_store_leaves_the_poll_waiting(open_engine):
    """A middleware that refuses a start before its write: nothing was stored, the give-back finds
    no task (and wakes nobody), and the poll waits on for the next delegation, which it is handed."""
    async with open_engine(pair(), poll_interval=30.0, worker=False) as engine:
        refused = [True]

        async def refuses_once(transition: Any, call_next: Any) -> Any:
            if refused[0]:
                refused[0] = False
                raise PermissionError("not now")
            return await call_next()

        engine.use(refuses_once, kinds=["start"])
        clerk = engine.consumer(QUEUE, "clerk", lease=LEASE)
        poll = asyncio.ensure_future(clerk.dequeue(1, wait=20))
        await polling(engine)
        with pytest.raises(PermissionError):
            await engine.start("pair")
        await asyncio.sleep(0.3)  # time for a give-back, if one found anything
        assert not poll.done()
        await polling(engine)  # still waiting
        await engine.start("pair")
        [first] = await asyncio.wait_for(poll, 10)
        assert first.payload == {"what": "first"}


async def test_a_dequeue_never_holds_more_than_its_limit_when_the_store_leases_more(open_engine, caplog):
    """PostgreSQL's ``UPDATE ... WHERE id IN (SELECT ... LIMIT n FOR UPDATE SKIP LOCKED)`` leased
    more rows than n under load (its subquery ran again on a recheck): a pull of one job got two,
    and the second, leased to the worker, reached nobody until its lease ran out. The store's
    statement now picks its rows once; whatever a store returns, a consumer's dequeue hands out at
    most its limit and gives the rest back to the queue at once."""
    async with open_engine(pair(), poll_interval=30.0, worker=False) as engine:
        first, second = await engine.start("pair"), await engine.start("pair")
        store = store_of(engine)
        real = store.dequeue

        async def greedy(queues: Any, kinds: Any, owner: str, limit: int, ttl: Any, now: Any) -> Any:
            return await real(queues, kinds, owner, limit + 1, ttl, now)

        store.dequeue = greedy  # type: ignore[method-assign]  # private: a store that leases one task more than asked, as PostgreSQL's statement did
        clerk = engine.consumer(QUEUE, "clerk", lease=LEASE)
        [one] = await clerk.dequeue(1)
        store.dequeue = real  # type: ignore[method-assign]
        assert "leased 2 tasks for a dequeue of 1" in caplog.text
        back = await asyncio.wait_for(clerk.dequeue(1, wait=5), 10)  # given back at once: not held for 30 s
        assert [t.eid for t in back] == [second if one.eid == first else first]
        assert back[0].lease_owner == "clerk"
