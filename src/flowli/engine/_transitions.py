"""The one transition path: every change to an execution is a named :class:`Transition` (an
intent plus its write), committed by :func:`commit`.

``commit`` runs the middleware chain (``engine.use``), the store write, and the reactions that
the write itself calls for: wake the workers for a task visible now, plan the sweeper's wake for
a timer or a task visible later, the second append of lifecycle entries onto the control log,
and the in-process wake-ups of whoever waits for an execution (``engine.result``,
``engine.watch``). Nothing else calls ``Store.write`` for a change to an execution.

The frame writes of a running activation (kind ``append``: steps, effects, child starts) take a
fast lane: no middleware, which sees the transitions that start, signal, decide, suspend, end or
recover an execution, but the same reactions and the observers (``engine.observe``), which are
plain callbacks called after every commit, appends included.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from flowli.domain import Entry, Principal, TaskKind
from flowli.store import Write, WriteResult

from ._runtime import LOG, Runtime

KINDS = frozenset({
    "start", "signal", "broadcast", "cancel", "migrate", "answer", "fail", "expire", "step_outcome",
    "hand_back", "suspend", "block", "end", "fire", "recover", "fold", "retry", "terminate", "append",
    "decide", "announce",
})
"""Every transition kind. ``append`` is the fast lane of a running activation's frame writes;
``decide`` applies to a decider's execution a command that a task carried (its start, a fired
timer, a child's end: see ``_deciding``); ``announce`` records on an execution what changed
nothing else (``engine.announce``)."""


@dataclass(slots=True)
class Transition:
    """One change to an execution (or, for ``fire`` and ``broadcast``, to several): what a
    middleware sees. ``payload`` is the intent's own data (a signal's channel and payload, a
    cancel's reason, an answer's value); ``write`` is what the store applies."""

    kind: str
    write: Write
    eid: str | None = None
    workflow: str | None = None
    principal: Principal | None = None
    application: str | None = None
    payload: Any = None
    then: Transition | None = None
    """A transition of another execution committed in the same store write, after this one
    (``Write.then``): both or neither, each through its own middleware and observers."""

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"unknown transition kind {self.kind!r}")


CallNext = Callable[[], Awaitable[WriteResult]]
Middleware = Callable[[Transition, CallNext], Awaitable[WriteResult]]
Observer = Callable[[Transition, WriteResult], None]


async def append(rt: Runtime, write: Write) -> WriteResult:
    """The fast lane: a plain append of a running activation's frame entries (``Intent.APPEND``)
    when no observer is registered (else it is a Transition of kind ``append``, for them). No
    middleware sees it; its reactions are those a plain append can call for: the second append
    of its lifecycle entries (an end, an execution.resumed), the wake-ups of who waits for the
    execution."""
    now = rt.clock.now()
    result = await rt.store.write(write, now)
    if write.status is not None or any(e.kind.lifecycle for e in write.entries):
        react(rt, write, result, now)  # an end, or an execution.resumed: the second append, the waiters
    elif rt.wakeups.hub.active:
        rt.wakeups.hub.touch(("journal", write.entries[0].eid))
    return result


async def commit(rt: Runtime, t: Transition) -> WriteResult:
    """Commit one transition: the middleware chain (not for ``append``), the store write, the
    reactions, the observers. A middleware that raises refuses it: nothing is written.

    With ``t.then`` (and its own ``then``, a chain): each joined transition's middleware chain
    runs inside the one's before it, and one store write holds them all; each middleware and
    observer sees its own transition and answer (a joined one's answer is also ``WriteResult.then``
    of the one before it)."""
    if t.then is None:
        return await _through(rt, t, lambda: _apply(rt, t))
    chain = [t]
    while chain[-1].then is not None:
        chain.append(chain[-1].then)  # type: ignore[arg-type]
    answers: list[WriteResult] = []

    async def all_of() -> WriteResult:
        now = rt.clock.now()
        answers.clear()  # a middleware that calls on again after a failure: this try's answers only
        for a, b in zip(chain, chain[1:]):
            a.write.then = b.write
        try:
            answer: WriteResult | None = await rt.store.write(t.write, now)
        finally:
            for a in chain:
                a.write.then = None  # the links are this commit's: a write tried again goes alone, or joined anew
        while answer is not None:
            answers.append(answer)
            answer = answer.then
        assert len(answers) == len(chain)
        for link, got in zip(chain, answers):
            react(rt, link.write, got, now)
        for observer in rt.interceptors.observers:
            for link, got in zip(chain, answers):
                observer(link, got)
        return answers[-1]

    call: CallNext = all_of
    for k in range(len(chain) - 1, 0, -1):
        call = _Joined(rt, chain[k], call, answers, k - 1).call
    return await _through(rt, t, call)


class _Joined:
    """The middleware chain of a joined transition, run inside the one's before it; its caller
    gets the answer of that one (``k``). A class, as ``_Chain``: no closure that keeps itself."""

    __slots__ = ("rt", "t", "inner", "answers", "k")

    def __init__(self, rt: Runtime, t: Transition, inner: CallNext, answers: list[WriteResult], k: int):
        self.rt, self.t, self.inner, self.answers, self.k = rt, t, inner, answers, k

    async def call(self) -> WriteResult:
        await _through(self.rt, self.t, self.inner)
        return self.answers[self.k]


async def _through(rt: Runtime, t: Transition, write: CallNext) -> WriteResult:
    """``write`` behind the middleware chain that sees ``t`` (none for ``append``)."""
    chain: list[Middleware] = rt.interceptors.chain(t.kind)
    if not chain:
        return await write()
    return await _Chain(chain, t, write).call(0)


class _Chain:
    """One transition's walk through its middleware chain. A class rather than a recursive
    closure: a nested function that calls itself is a reference cycle (the function, its cell),
    which would keep the transition and its write alive until the cyclic collector runs."""

    __slots__ = ("chain", "t", "write")

    def __init__(self, chain: list[Middleware], t: Transition, write: CallNext):
        self.chain, self.t, self.write = chain, t, write

    async def call(self, i: int) -> WriteResult:
        if i == len(self.chain):
            return await self.write()
        called = False

        async def call_next() -> WriteResult:
            nonlocal called
            if called:
                raise RuntimeError(f"middleware {self.chain[i]!r} called call_next twice for one {self.t.kind} transition")
            called = True
            return await self.call(i + 1)

        return await self.chain[i](self.t, call_next)


async def _apply(rt: Runtime, t: Transition) -> WriteResult:
    now = rt.clock.now()
    result = await rt.store.write(t.write, now)
    react(rt, t.write, result, now)
    for observer in rt.interceptors.observers:
        observer(t, result)
    return result


def react(rt: Runtime, w: Write, result: WriteResult, now: datetime) -> None:
    """The reactions that a committed write calls for, derived from the write alone."""
    created = [new for new, made in zip(w.executions, result.created) if made]
    # a RESUME whose lease the write acquired (Write.acquire) is acked already: no worker need look
    resumed = w.resumes if result.acquired is None else [r for r in w.resumes if r.id != w.acquire.resume]  # type: ignore[union-attr]
    # the workers of this process look for START, RESUME and RUN_STEP tasks; a DELEGATE task
    # wakes the long polls of its queue only (its consumers'), and one written leased (a hand-off)
    # wakes nobody
    if resumed or w.wake_waiters or result.woke or any(new.task is not None for new in created) \
            or any(task.kind is not TaskKind.DELEGATE for task in w.tasks):
        rt.wakeups.work.set()
    if rt.wakeups.hub.active and w.tasks:
        per_queue: dict[str, int] = {}
        for task in w.tasks:
            if task.visible_at <= now and task.lease_owner is None:
                per_queue[task.queue] = per_queue.get(task.queue, 0) + 1
        for queue, count in per_queue.items():
            rt.wakeups.hub.touch_some(("queue", queue), count)  # consumers' long polls (Consumer.dequeue)
    # (a task written leased, a hand-off, is not due at its lease's end: that is the sweeper's)
    later = [t.visible_at for t in w.tasks if t.visible_at > now and t.lease_owner is None] + [t.at for t in w.timers]
    if later:
        rt.wakeups.timer_set(min(later))
    logged = False  # the write put lifecycle entries on the control log itself
    if rt.store.announces_in_write:
        logged = bool(created) or any(e.kind.lifecycle for e in w.entries)
    else:
        lifecycle = [Entry(**{**e.__dict__, "seq": s}) for e, s in zip(w.entries, result.entry_seqs) if e.kind.lifecycle]
        lifecycle += [Entry(**{**new.entry.__dict__, "seq": 1}) for new in created]
        if lifecycle:
            rt.announcer.soon(lifecycle)
    if rt.wakeups.hub.active:
        for eid in {e.eid for e in w.entries}:
            rt.wakeups.hub.touch(("journal", eid))
        if w.announcements or logged:
            rt.wakeups.hub.touch(LOG)
    if w.status is not None and w.status.status.terminal:
        rt.wakeups.ended(w.status.eid)
