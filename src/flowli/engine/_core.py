"""The core of an activation: its state and the primitives that every frame uses.

An activation is one run of a workflow function under one lease. This class holds what the
journal said (:class:`Memo`), the frame ids the code created (:class:`FrameIds`), the waits, and
the writes: every write of a frame goes through :meth:`Core._write`, fenced by the lease, on the
fast lane of the transition path. The frames themselves are in ``_steps`` and ``_waits``; the
drive loop and the ends in ``_activation``.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
from collections import defaultdict
from typing import Any, Awaitable, TypeVar

from flowli.domain import (
    Cancelled,
    Code,
    Entry,
    EntryKind,
    ExecutionRecord,
    FrameKind,
    LeaseLost,
    NondeterminismError,
    StepFailed,
)
from flowli.domain import FlowliError as FlowliErrorBase
from flowli.store import Fence, Intent, Write, WriteResult

from ._context import GROUP, Context, Scope
from ._frames import ROOT, FrameIds, Memo, Wait, divergence, unvisited
from ._registry import WorkflowDef
from ._runtime import Runtime
from ._tracing import execution_context
from ._transitions import Transition, append, commit

T = TypeVar("T")


_OUTCOMES = frozenset({EntryKind.FRAME_COMPLETED, EntryKind.FRAME_FAILED})


class Closed(BaseException):
    """The activation is ending: no frame may write any more."""


class Stopping(BaseException):
    """The worker stops: the workflow goes no further than the frames under way, and the
    execution is handed back (a BaseException: a workflow's ``except Exception:`` lets it by)."""


class StoreFailure(BaseException):
    """The store failed under a frame (a lost connection, too many clients): not the workflow's
    failure, so the workflow cannot catch it; the activation ends and the worker hands the
    execution back."""

    def __init__(self, cause: BaseException):
        self.cause = cause
        super().__init__(f"the store failed: {type(cause).__name__}: {cause}")


async def store_call(call: Awaitable[T]) -> T:
    """Await a store call; a failure of the store itself becomes a StoreFailure."""
    try:
        return await call
    except (LeaseLost, asyncio.CancelledError, FlowliErrorBase):
        raise
    except Exception as exc:
        raise StoreFailure(exc) from exc


def frame_failed(fid: str, entry: Entry, attempts: int) -> BaseException:
    """What a frame's final failure raises in the workflow: StepFailed, or the built-in
    TimeoutError when a wait with a timeout ran out."""
    error = entry.error or {}
    if error.get("timeout"):
        return TimeoutError(error.get("message", ""))
    code = error.get("code") if isinstance(error.get("code"), str) else None
    details = error.get("details") if isinstance(error.get("details"), dict) else None
    return StepFailed(fid, error.get("type", "Error"), error.get("message", ""), attempts, code, details)


class Core(Context):
    """An activation's state and primitives (abstract: ``Activation`` is the one to run)."""

    def __init__(self, rt: Runtime, wf: WorkflowDef, record: ExecutionRecord, epoch: int, journal: list[Entry]):
        self.rt = rt
        self.wf = wf
        self.record = record
        self.epoch = epoch
        self.fence = Fence(record.eid, rt.owner, epoch)
        self.memo = Memo(journal)
        self.last_seq = self.memo.last_seq
        self.horizon = self.memo.last_seq
        """The last seq of the journal this activation started from."""
        self.ids = FrameIds()
        self._journal = journal
        self._started = journal[0].value if journal and journal[0].kind is EntryKind.EXECUTION_STARTED else None
        self.span: Any = None
        """The span of this activation (tracing on), else None."""
        self.waits: dict[str, Wait] = {}
        self.pending: list[Entry] = []
        """Entries that go with the next write (an execution.resumed, the frame.started of a wait)."""
        if self.memo.resumed:
            # "seen": the journal this activation starts from (``Context.first`` orders by it)
            self.pending.append(self._entry(EntryKind.EXECUTION_RESUMED, ROOT, FrameKind.ROOT,
                                            value={"epoch": epoch, "seen": self.memo.last_seq}))
        self.live = 0
        self.changed = asyncio.Event()
        self.channel_locks: dict[str, asyncio.Lock] = defaultdict(asyncio.Lock)
        self.cancel_requested = record.cancel_requested is not None
        self.nondeterminism: NondeterminismError | None = None
        self.diverged: dict[str, Any] = {}
        self.groups: dict[str, str] = {}
        """The label (``ctx.group``) of each frame created inside one."""
        """The arguments the journal recorded and the code passes now, at a changed digest."""
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
        """New frames held until the replay meets the journal's frames (see ``_gate``): each with the
        first recorded frame that it would run ahead of."""
        self._next_gate: tuple[str, str] | None = None
        self.outcome_seqs: dict[str, int] = {}
        """The journal seq of each outcome this activation wrote (``Context.first`` orders by it)."""

    # ---- identity -------------------------------------------------------------------------

    @property
    def eid(self) -> str:
        return self.record.eid

    @property
    def workflow(self) -> str:
        return self.wf.name

    @property
    def version(self) -> str:
        return self.wf.version

    @property
    def application(self) -> str | None:
        return self.record.application

    @property
    def items(self) -> Any:
        return self.rt.store.items()

    def mark_lost(self) -> None:
        self.lost = True
        self.changed.set()

    def mark_cancel_requested(self) -> None:
        self.cancel_requested = True

    def mark_stopping(self) -> None:
        """The worker stops: the frames under way finish, no new one starts."""
        self.stopping = True
        self.changed.set()

    # ---- writes ---------------------------------------------------------------------------

    def typed_arguments(self) -> list[Any]:
        """The execution's arguments as its function takes them (``WorkflowDef.arguments``);
        ArgumentsInvalid naming each bad field when one does not fit its type."""
        return self.wf.arguments(self.record.args, bool((self._started or {}).get("typed")))

    @functools.cached_property
    def _contexts(self) -> tuple[Any, Any]:
        retries = sum(1 for e in self._journal if e.kind is EntryKind.EXECUTION_RETRIED)
        return execution_context(self.eid, self._started, retries)

    @property
    def trace(self) -> Any:
        """The span context of the execution's own span (see _tracing; derived when first asked)."""
        return self._contexts[0]

    @property
    def trace_parent(self) -> Any:
        """The span context the execution was started in, or None."""
        return self._contexts[1]

    def _entry(
        self,
        kind: EntryKind,
        fid: str,
        frame_kind: FrameKind,
        *,
        name: str | None = None,
        attempt: int | None = None,
        dig: str | None = None,
        value: Any = None,
        error: dict[str, Any] | None = None,
        ref: str | None = None,
    ) -> Entry:
        code = Code(self.wf.name, self.wf.version, frame_kind.value, name or fid.rsplit("/", 1)[-1], ref or self.wf.ref)
        if kind is EntryKind.FRAME_STARTED:
            label = self.groups.get(fid)
            if label is not None:
                value = {**value, "group": label} if isinstance(value, dict) else {"group": label}
        return Entry(
            eid=self.eid, kind=kind, fid=fid, attempt=attempt, digest=dig, value=value, error=error,
            provenance=self.rt.provenance(epoch=self.epoch, code=code, attempt=attempt),
        )

    async def _write(self, write: Write, *, kind: str = "append", final: bool = False, payload: Any = None,
                     then: Transition | None = None) -> WriteResult:
        """Commit a write of this execution under its fence. ``append`` (a frame's write) takes the
        fast lane of the transition path. The caller sets the write's intent (``plain`` marks a
        write of entries only); the entries pending are only entries of this execution, so they
        keep it. ``then``: another execution's transition committed in the same store write."""
        if self.closing and not final:
            raise Closed()
        if self.lost:
            raise LeaseLost(self.eid, self.epoch)
        if self.pending:
            write.put_first(self.pending)  # the memos move with the entries they name
            self.pending = []
        write.fence = self.fence
        try:
            if kind == "append" and write.intent is Intent.APPEND and not self.rt.interceptors.observers and then is None:
                result = await store_call(append(self.rt, write))  # the fast lane
            else:
                t = Transition(kind, write, self.eid, self.wf.name, self.rt.principal, self.record.application, payload,
                               then)
                result = await store_call(commit(self.rt, t))
        except LeaseLost:
            self.mark_lost()
            raise
        if result.entry_seqs:
            self.last_seq = max(self.last_seq, *result.entry_seqs)
            for entry, seq in zip(write.entries, result.entry_seqs):
                if entry.fid is not None and entry.kind in _OUTCOMES:
                    self.outcome_seqs[entry.fid] = seq
        return result

    # ---- frames ---------------------------------------------------------------------------

    def _frame(self, name: str, key: str | None, kind: FrameKind, dig: str, args: Any = None) -> tuple[str, Entry | None]:
        """Assign the frame id (at call time) and check it against the journal.

        Returns the fid and its outcome entry when the frame has one (its memo, or its final failure).
        """
        self._next_gate = None
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
            self._nondeterministic(fid, detail)
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
            self._next_gate = (fid, next(f for f in self.memo.order if f not in self.ids.visited))
        return fid, outcome

    def _nondeterministic(self, fid: str, detail: str) -> None:
        self.nondeterminism = NondeterminismError(self.eid, fid, detail)
        raise self.nondeterminism

    def _check_all_visited(self) -> None:
        missed = unvisited(self.memo, self.ids.visited)
        if missed:
            self.nondeterminism = NondeterminismError(
                self.eid, missed[0], f"the journal holds {len(missed)} frame(s) that this code never created: "
                + ", ".join(missed[:5])
            )

    def _spawn(self, coro: Awaitable[Any]) -> asyncio.Task[Any]:
        self.live += 1
        gate, self._next_gate = self._next_gate, None

        async def run() -> Any:
            try:
                if gate is not None:
                    try:
                        await self._gate(*gate)
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

    async def _gate(self, fid: str, ahead: str) -> None:
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

    def _stuck_at_a_gate(self) -> tuple[str, str] | None:
        """The first held frame and what it would run ahead of, when every live frame is held."""
        if self.gates and self.live == len(self.gates):
            fid = next(iter(self.gates))
            return fid, self.gates[fid]
        return None

    def _done(self, value: Any = None, exc: BaseException | None = None) -> asyncio.Future[Any]:
        fut = asyncio.get_running_loop().create_future()
        if exc is not None:
            fut.set_exception(exc)
        else:
            fut.set_result(value)
        return fut

    async def _wait(self, wait: Wait) -> Any:
        """The frame waits: the activation suspends once every live frame waits."""
        self.waits[wait.fid] = wait
        self.live -= 1
        self.changed.set()
        try:
            await asyncio.get_running_loop().create_future()  # resolved by a later activation
        finally:
            self.live += 1

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
        seq = self.outcome_seqs.get(fid)
        if seq is None:
            return None
        return (self.horizon + 0.5, seq)

    def _outcome_value(self, fid: str, outcome: Entry) -> asyncio.Future[Any]:
        if outcome.kind is EntryKind.FRAME_FAILED:
            return self._done(exc=frame_failed(fid, outcome, len(self.memo.failures[fid])))
        return self._done(outcome.value)

    def channel_name(self, channel: str, scope: Scope) -> str:
        if scope == "execution":
            return f"{self.eid}.{channel}"
        if scope == "global":
            return global_channel(channel, self.record.application)
        raise ValueError(f"scope must be 'execution' or 'global', got {scope!r}")


def global_channel(channel: str, application: str | None) -> str:
    """The stored name of a global channel: an application's own global channels are apart from
    every other application's (``{application}::{channel}``)."""
    return channel if application is None else f"{application}::{channel}"


def plain(write: Write) -> Write:
    """Mark a write that holds only entries of one fenced execution as a plain append."""
    if write.intent is None:
        write.intent = Intent.APPEND
    return write
