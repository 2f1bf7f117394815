"""The engine's reads of what the store keeps beside the journals: pages of decider states by the
index each state wrote (``Decider.index``), the open tasks of a page of executions, the
candidates of stuck runs, tasks and timers. Each is a bounded number of statements whatever the
number of executions stored."""

from __future__ import annotations

import asyncio
import builtins
from datetime import timedelta
from typing import Any

from flowli.domain import ExecutionRecord, Task, Timer, belongs
from flowli.log import Evidence
from flowli.store import StateQuery, Store, StoredState

from ._clock import Clock
from ._runtime import Runtime


class ReadModels:
    """Part of the Engine (its store and clock)."""

    _store: Store
    _rt: Runtime
    clock: Clock

    async def decided(self, query: StateQuery) -> tuple[builtins.list[StoredState], int]:
        """A page of a decider's executions by the index its states wrote (``Decider.index``),
        newest first, with each one's record and state, and how many match in all: two
        statements whatever the page's size or the number of executions stored."""
        return await self._store.read_states(query)

    async def decided_counts(self, query: StateQuery) -> dict[str, int]:
        """How many of a decider's executions match ``query`` per label (its page aside): the
        counts beside a list, one statement whatever the number of labels."""
        return await self._store.read_state_counts(query)

    async def idle(self, older_than: timedelta, *, application: str | None = None,
                   limit: int = 200) -> builtins.list[ExecutionRecord]:
        """Executions not ended whose record has not changed for ``older_than`` and that no future
        timer will wake, oldest first: the candidates of stuck runs, read by an index (their cost
        follows the answer, not the number of executions)."""
        now = self.clock.now()
        return await self._store.read_idle(now - older_than, now, application, limit)

    async def timers(self, eid: str | None = None) -> builtins.list[Timer]:
        """The timers set, for one execution or all."""
        return await self._store.read_timers(eid)

    async def tasks(
        self, queue: str | None = None, eid: str | None = None, *, include_acked: bool = False,
        application: str | None = None,
    ) -> builtins.list[Task]:
        """The tasks on queues, not yet acked (with ``include_acked``, also the acked and withdrawn)."""
        tasks = await self._store.read_tasks(queue, eid, include_acked)
        return [t for t in tasks if belongs(t.application, application)]

    async def task(self, task_id: str, *, application: str | None = None) -> Task | None:
        """One task by id (acked and withdrawn ones too), or None (also for another application's)."""
        task = await self._store.read_task(task_id)
        if task is None or not belongs(task.application, application):
            return None
        return task

    async def evidence(self, eid: str) -> builtins.list[Evidence]:
        """What the steps of an execution wrote while they ran, attempt by attempt (never authority)."""
        return await asyncio.to_thread(self._rt.bucket.read, eid)

    async def messages(self, eid: str, channel: str) -> builtins.list[Any]:
        return await self._store.read_messages(f"{eid}.{channel}", 0, 10_000)
