"""The replay of an activation: what the journal says (:class:`Memo`), the frame ids the code
creates (:class:`FrameIds`) checked against it, and the frames under way.

Each frame the code creates asks :meth:`Replay.frame` for its id and its memo; a frame without
one runs as a task of the activation (:meth:`Replay.spawn`), and a frame that waits tells the
drive loop so (:meth:`Replay.wait`). The checks of a replay are here: a changed kind or argument
digest, a new frame created ahead of frames the journal holds (held at a gate), a frame the
journal holds that the code never created. No I/O: the writes are the Writer's.
"""

from __future__ import annotations

import asyncio
import inspect
from typing import Any, Awaitable

from flowli.domain import Cancelled, Entry, EntryKind, FrameKind, NondeterminismError

from ._context import GROUP
from ._core import Stopping, frame_failed
from ._frames import FrameIds, Memo, Wait, divergence, unvisited


class Replay:
    """The frames of one activation of execution ``eid``, replayed against ``journal``."""

    def __init__(self, eid: str, journal: list[Entry], cancel_requested: bool):
        self.eid = eid
        self.memo = Memo(journal)
        self.horizon = self.memo.last_seq
        """The last seq of the journal this activation started from."""
        self.ids = FrameIds()
        self.waits: dict[str, Wait] = {}
        """The frames that wait, by frame id: the activation suspends once no other frame is live."""
        self.live = 0
        self.changed = asyncio.Event()
        """Set on every change the drive loop looks at (a frame waits or ends, the lease is lost)."""
        self.cancel_requested = cancel_requested
        self.nondeterminism: NondeterminismError | None = None
        self.diverged: dict[str, Any] = {}
        """The arguments the journal recorded and the code passes now, at a changed digest."""
        self.groups: dict[str, str] = {}
        """The label (``ctx.group``) of each frame created inside one."""
        self.lost = False
        self.closing = False
        self.stopping = False
        self.frame_tasks: set[asyncio.Task[Any]] = set()
        self.unmet = len(self.memo.started)
        """Frames of the journal that this replay has not created yet."""
        self.all_met = asyncio.Event()
        if not self.unmet:
            self.all_met.set()
        self.gates: dict[str, str] = {}
        """New frames held until the replay meets the journal's frames (see ``gate``): each with the
        first recorded frame that it would run ahead of."""
        self.next_gate: tuple[str, str] | None = None
        self.outcome_places: dict[str, tuple[float, int]] = {}
        """Where each outcome this activation wrote stands among the outcomes the workflow could
        see (``Context.first`` orders by it; see ``outcome_order``)."""
        self.wakers: dict[str, asyncio.Future[None]] = {}
        """The waiting frames' futures: ``wake`` resolves them when a cached activation continues."""

    def mark_lost(self) -> None:
        self.lost = True
        self.changed.set()

    def mark_stopping(self) -> None:
        """The worker stops: the frames under way finish, no new one starts."""
        self.stopping = True
        self.changed.set()

    def frame(self, name: str, key: str | None, kind: FrameKind, dig: str, args: Any = None) -> tuple[str, Entry | None]:
        """Assign the frame id (at call time) and check it against the journal.

        Returns the fid and its outcome entry when the frame has one (its memo, or its final failure).
        """
        self.next_gate = None
        fid = self.ids.assign(name, key)
        label = GROUP.get()
        if label is not None:
            self.groups[fid] = label
        if self.nondeterminism is not None:
            raise self.nondeterminism
        detail = divergence(self.memo, fid, kind, dig)
        if detail is not None:
            recorded = self.memo.started[fid].value
            recorded = {k: v for k, v in recorded.items() if k in ("args", "kwargs")} if isinstance(recorded, dict) else {}
            self.diverged = {"recorded": recorded or None, "current": args}
            self.nondeterminism = NondeterminismError(self.eid, fid, detail)
            raise self.nondeterminism
        if fid in self.memo.started:
            self.unmet -= 1
            if not self.unmet:
                self.all_met.set()
        outcome = self.memo.outcome.get(fid)
        if outcome is None and self.cancel_requested and not self.closing:
            raise Cancelled(f"execution {self.eid} was cancelled (seen at frame {fid})")
        if outcome is None and self.stopping:
            raise Stopping(f"the worker stops: execution {self.eid} is handed back at frame {fid}")
        if self.unmet and fid not in self.memo.started:
            # a frame the journal does not hold, while it holds frames this replay has not met: it
            # runs only once those are met (they were concurrent with it in the earlier run)
            self.next_gate = (fid, next(f for f in self.memo.order if f not in self.ids.visited))
        return fid, outcome

    def check_all_visited(self) -> None:
        if not self.unmet:  # every frame of the journal it started from was created (the others are its own)
            return
        missed = unvisited(self.memo, self.ids.visited)
        if missed:
            self.nondeterminism = NondeterminismError(
                self.eid, missed[0], f"the journal holds {len(missed)} frame(s) that this code never created: "
                + ", ".join(missed[:5])
            )

    def spawn(self, coro: Awaitable[Any]) -> asyncio.Future[Any]:
        """Run a frame without a memo as a task of the activation (held at its gate, if any)."""
        self.live += 1
        gate, self.next_gate = self.next_gate, None

        async def run() -> Any:
            try:
                if gate is not None:
                    try:
                        await self.gate(*gate)
                    except BaseException:
                        if inspect.iscoroutine(coro):
                            coro.close()  # never started: it ran nothing
                        raise
                return await coro
            finally:
                self.live -= 1
                self.changed.set()

        task = asyncio.ensure_future(run())
        self.frame_tasks.add(task)
        task.add_done_callback(self.frame_tasks.discard)
        return task

    async def gate(self, fid: str, ahead: str) -> None:
        """Hold a new frame until this replay has met every frame of the journal. In the earlier
        run those frames were created while this one was under way (a gather): the replay meets
        them without it. If instead the replay cannot go on without it (the workflow awaits it),
        the code created it before a frame it created later in the earlier run: inserted code, a
        reordering, a renamed function. The drive loop says so (NondeterminismError naming both)."""
        self.gates[fid] = ahead
        self.changed.set()
        try:
            await self.all_met.wait()
        finally:
            del self.gates[fid]

    def stuck_at_a_gate(self) -> tuple[str, str] | None:
        """The first held frame and what it would run ahead of, when every live frame is held."""
        if self.gates and self.live == len(self.gates):
            fid = next(iter(self.gates))
            return fid, self.gates[fid]
        return None

    def quiescent(self) -> bool:
        """Every live frame waits (and one at least does)."""
        return self.live == 0 and bool(self.waits)

    @staticmethod
    def done(value: Any = None, exc: BaseException | None = None) -> asyncio.Future[Any]:
        fut = asyncio.get_running_loop().create_future()
        if exc is not None:
            fut.set_exception(exc)
        else:
            fut.set_result(value)
        return fut

    async def wait(self, wait: Wait) -> None:
        """The frame waits: the activation suspends once every live frame waits. A later
        activation replays the frame and finds what it waited for; or, when this activation was
        kept in the workflow cache and continues (``wake``), the wait returns and the frame looks
        again at what it waits for."""
        self.waits[wait.fid] = wait
        self.live -= 1
        self.changed.set()
        woken = self.wakers[wait.fid] = asyncio.get_running_loop().create_future()
        try:
            await woken
        finally:
            self.live += 1

    def wake(self, horizon: int, epoch: int) -> None:
        """A cached activation continues under lease ``epoch`` with the journal up to seq
        ``horizon``: every waiting frame looks again at what it waits for."""
        self.memo.seen[epoch] = self.horizon = self.memo.last_seq = horizon
        self.closing = self.lost = self.stopping = False
        self.waits = {}
        wakers, self.wakers = self.wakers, {}
        for woken in wakers.values():
            if not woken.done():
                woken.set_result(None)

    def outcome_value(self, fid: str, outcome: Entry) -> asyncio.Future[Any]:
        if outcome.kind is EntryKind.FRAME_FAILED:
            return self.done(exc=frame_failed(fid, outcome, len(self.memo.failures[fid])))
        return self.done(outcome.value)

    def outcome_order(self, fid: str) -> tuple[float, int] | None:
        """Where the outcome of frame ``fid`` stands in the order in which the workflow could see
        outcomes (``Context.first``), or None when it has none yet.

        An outcome another party appended (a consumer's answer) is seen by the next activation:
        its place is its seq. An outcome an activation wrote itself (a message received, a timer
        passed) was seen by that activation after everything in the journal it started from and
        before anything appended meanwhile: its place is just after that journal's last seq
        (``seen`` of its execution.resumed), then its own seq."""
        outcome = self.memo.outcome.get(fid)
        if outcome is not None and outcome.seq is not None:
            epoch = outcome.provenance.site.epoch
            if epoch is None:
                return (outcome.seq, outcome.seq)
            return (self.memo.seen.get(epoch, 1) + 0.5, outcome.seq)
        return self.outcome_places.get(fid)
