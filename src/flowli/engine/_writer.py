"""The writer of an activation: its entries (with their provenance and code) and its writes,
each fenced by the lease and committed on the transition path (a frame's plain append on its
fast lane). It also knows the execution's trace: its own span context and the one it started in.
"""

from __future__ import annotations

import functools
from typing import Any

from flowli.domain import Code, Entry, EntryKind, ExecutionRecord, FrameKind, LeaseLost
from flowli.store import Fence, Intent, Write, WriteResult

from ._core import Closed, store_call
from ._frames import ROOT
from ._registry import WorkflowDef
from ._replay import Replay
from ._runtime import Runtime
from ._tracing import execution_context
from ._transitions import Transition, append, commit

_OUTCOMES = frozenset({EntryKind.FRAME_COMPLETED, EntryKind.FRAME_FAILED})


class Writer:
    """The writes of one activation of ``record`` under lease ``epoch``."""

    def __init__(self, rt: Runtime, wf: WorkflowDef, record: ExecutionRecord, epoch: int, replay: Replay,
                 journal: list[Entry]):
        self.rt = rt
        self.wf = wf
        self.record = record
        self.eid = record.eid
        self.epoch = epoch
        self.replay = replay
        self.fence = Fence(record.eid, rt.owner, epoch)
        self.started = journal[0].value if journal and journal[0].kind is EntryKind.EXECUTION_STARTED else None
        """The value of the execution's started entry (its arguments, its trace), if the journal has it."""
        self.span: Any = None
        """The span of this activation (tracing on), else None."""
        self.pending: list[Entry] = []
        """Entries that go with the next write (an execution.resumed, the frame.started of a wait)."""
        self.written: set[int] = set()
        """The seqs of the entries written since the journal this activation started from (or
        last continued from, see ``resume``)."""
        if replay.memo.resumed:
            self._resumed(replay.memo.last_seq)

    def _resumed(self, seen: int) -> None:
        # "seen": the journal this activation starts from (``Context.first`` orders by it)
        self.pending.append(self.entry(EntryKind.EXECUTION_RESUMED, ROOT, FrameKind.ROOT,
                                       value={"epoch": self.epoch, "seen": seen}))

    def resume(self, record: ExecutionRecord, epoch: int, seen: int) -> None:
        """A cached activation continues under lease ``epoch`` from the journal up to seq ``seen``."""
        self.record, self.epoch, self.fence = record, epoch, Fence(record.eid, self.rt.owner, epoch)
        self.written = set()
        self.span = None
        self._resumed(seen)

    @functools.cached_property
    def _contexts(self) -> tuple[Any, Any]:
        return execution_context(self.eid, self.started, self.replay.memo.retries)

    @property
    def trace(self) -> Any:
        """The span context of the execution's own span (see _tracing; derived when first asked)."""
        return self._contexts[0]

    @property
    def trace_parent(self) -> Any:
        """The span context the execution was started in, or None."""
        return self._contexts[1]

    def entry(
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
            label = self.replay.groups.get(fid)
            if label is not None:
                value = {**value, "group": label} if isinstance(value, dict) else {"group": label}
        return Entry(
            eid=self.eid, kind=kind, fid=fid, attempt=attempt, digest=dig, value=value, error=error,
            provenance=self.rt.provenance(epoch=self.epoch, code=code, attempt=attempt),
        )

    async def write(self, write: Write, *, kind: str = "append", final: bool = False, payload: Any = None,
                    then: Transition | None = None) -> WriteResult:
        """Commit a write of this execution under its fence. ``append`` (a frame's write) takes the
        fast lane of the transition path. The caller sets the write's intent (``plain`` marks a
        write of entries only); the entries pending are only entries of this execution, so they
        keep it. ``then``: another execution's transition committed in the same store write."""
        t = self.transition(write, kind=kind, final=final, payload=payload, then=then)
        try:
            if t is None:
                result = await store_call(append(self.rt, write))  # the fast lane
            else:
                result = await store_call(commit(self.rt, t))
        except LeaseLost:
            self.replay.mark_lost()
            raise
        self.settle(write, result)
        return result

    def transition(self, write: Write, *, kind: str, final: bool = False, payload: Any = None,
                   then: Transition | None = None) -> Transition | None:
        """``write`` made ready to commit under this execution's fence (its pending entries first),
        as the transition that commits it; None for a plain append of the fast lane. The caller
        commits it (``commit``), then gives its answer to ``settle``."""
        replay = self.replay
        if replay.closing and not final:
            raise Closed()
        if replay.lost:
            raise LeaseLost(self.eid, self.epoch)
        if self.pending:
            write.put_first(self.pending)  # the memos move with the entries they name
            self.pending = []
        write.fence = self.fence
        if kind == "append" and write.intent is Intent.APPEND and not self.rt.interceptors.observers and then is None:
            return None
        return Transition(kind, write, self.eid, self.wf.name, self.rt.principal, self.record.application, payload, then)

    def settle(self, write: Write, result: WriteResult) -> None:
        """What this execution keeps of a committed ``write``: the places of its outcomes."""
        replay = self.replay
        if result.entry_seqs:
            self.written.update(result.entry_seqs)
            for entry, seq in zip(write.entries, result.entry_seqs):
                if entry.fid is not None and entry.kind in _OUTCOMES:
                    replay.outcome_places[entry.fid] = (replay.horizon + 0.5, seq)
