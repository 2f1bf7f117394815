"""The upgrade of the pipelines of the previous release: executions of the Python workflow
``flowli.pipeline`` of version "1", which this release no longer has. Each is converted once
into an execution of the decider (version "2"): its state folded from its journal, then handed
to the decider by ``engine.adopt`` in one write (its open attempts withdrawn and dispatched again
by the decider, with their next attempt numbers). A crash between two conversions leaves some
converted and others not; the next process converts the rest, and a second conversion of one
changes nothing (its state exists: the adoption's compare-and-set refuses it).

The fold reads only what the workflow journaled, and runs none of its code. That workflow took
one event at a time, in the order of its journal (``ctx.first``), and decided on each what the
decider decides on the same event, so each event of its journal is given to the decider's own
``decide`` as the command it is now:

- ``execution.started``: Start (its input is the pipeline's declaration);
- the outcome of a delegate frame ``root/delegate:<stage id>.<run>.<n>`` (an answer: Answered,
  or Failed when it says ``ok: false``; a deadline: the stage's timeout timer; a final failure,
  Failed): for the stage's run that is current only, as the workflow ignored the others;
- the end of a sleep frame (a retry's wait, the stages' retries in the order they were decided):
  the retry's timer;
- a message received on the ``pipeline`` channel: Signal; on ``pipeline-reopen`` (a rerun of a
  failed pipeline): Retried; for a pipeline not ended, the messages sent and not received yet too;
- ``execution.cancelled``: CancelRequested.

The workflow ended a pipeline whose stages were all done only after a last look for a message
(an append, a rerun) that came meanwhile; so the fold marks it completed at its
``execution.completed`` entry, not when its last stage completed."""

from __future__ import annotations

import asyncio
import builtins
import logging
from collections import deque
from collections.abc import Sequence
from typing import Any

from flowli.domain import Entry, EntryKind, OperationRefused, UnknownExecutionError
from flowli.engine import Engine
from flowli.engine.deciders import (
    Answered,
    CancelRequested,
    Event,
    Failed,
    Retried,
    Signal,
    Start,
    TimerFired,
)

from ._decider import CHANNEL, INITIAL, VERSION, WORKFLOW, decide, evolve

log = logging.getLogger("flowli.pipelines")
REOPEN = "pipeline-reopen"
"""The channel on which the workflow of version 1 took the message of a rerun of a failed pipeline."""
TRIES = 20
"""Conversions of one pipeline tried in a row (its journal moved on, a worker held it) before
it is left for the next upgrade."""


class Fold:
    """The decider's state of a pipeline of version 1, built entry by entry from its journal."""

    def __init__(self) -> None:
        self.state: dict[str, Any] = INITIAL
        self.frames: dict[str, tuple[str, int, int]] = {}
        """The delegate frames: (stage id, run, the stage's attempts before the frame)."""
        self.retries: deque[str] = deque()
        """The keys of the retries decided whose sleep frame has not started yet, in order."""
        self.sleeps: dict[str, str] = {}
        """The sleep frames started: the key of the retry each waits for."""
        self.received: dict[str, int] = {}
        """The last message received on each channel of the execution (its seq)."""

    def command(self, command: Any) -> None:
        events, _ = decide(self.state, command)
        for event in events:
            if event.kind == "pipeline.completed":
                continue  # the workflow's own end says it (see the module's docstring)
            if event.kind == "stage.retry_scheduled":
                stage = self.state["stages"][event.data["stage"]]
                self.retries.append(f"retry:{stage['id']}:{event.data['attempt']}")
            self.state = evolve(self.state, event)

    def entry(self, e: Entry) -> None:
        at = e.at.isoformat()
        fid = e.fid or ""
        value = e.value
        if e.kind is EntryKind.EXECUTION_STARTED:
            args = (value or {}).get("args") or [None]
            self.command(Start(args[0], at=at))
        elif e.kind is EntryKind.EXECUTION_COMPLETED:
            if self.state["outcome"] is None:
                self.state = evolve(self.state, Event("pipeline.completed", {"at": at}))
        elif e.kind is EntryKind.EXECUTION_CANCELLED:
            reason = value.get("reason") if isinstance(value, dict) else None
            self.command(CancelRequested(str(e.provenance.actor), reason, at=at))
        elif fid.startswith("root/delegate:"):
            self._delegate(e, fid, at)
        elif fid.startswith("root/sleep#"):
            if e.kind is EntryKind.FRAME_STARTED and self.retries:
                self.sleeps[fid] = self.retries.popleft()
            elif e.kind is EntryKind.FRAME_COMPLETED and fid in self.sleeps:
                self.command(TimerFired(self.sleeps.pop(fid), at=at))
        elif fid.startswith("root/receive#") and e.kind is EntryKind.FRAME_COMPLETED and isinstance(value, dict):
            self.message(str(value.get("channel") or ""), value.get("seq"), value.get("payload"), at)

    def message(self, channel: str, seq: Any, payload: Any, at: str | None) -> None:
        if isinstance(seq, int):
            self.received[channel] = max(seq, self.received.get(channel, 0))
        if channel.endswith(f".{REOPEN}"):
            self.command(Retried(channel=CHANNEL, payload=payload, at=at))
        elif channel.endswith(f".{CHANNEL}"):
            self.command(Signal(CHANNEL, payload, at=at))

    def _delegate(self, e: Entry, fid: str, at: str) -> None:
        sid, _, rest = fid.removeprefix("root/delegate:").partition(".")
        run_text = rest.partition(".")[0]
        name = self.state["ids"].get(sid)
        if name is None or not run_text.isdigit():
            return
        stage = self.state["stages"][name]
        if e.kind is EntryKind.FRAME_STARTED:
            if stage["run"] == int(run_text):
                self.frames[fid] = (sid, int(run_text), max(0, stage["attempts"] - 1))
            return
        if fid not in self.frames:
            return
        _, run, base = self.frames[fid]
        if stage["run"] != run or stage["status"] != "Pending":
            return  # an outcome of a run that a rerun or a skip replaced
        if e.kind is EntryKind.FRAME_FAILED:
            error = e.error if isinstance(e.error, dict) else {}
            if error.get("timeout"):  # the stage's timeOut passed
                self.command(TimerFired(f"timeout:{sid}:{stage['attempts']}", at=at))
                return
            if not (isinstance(e.value, dict) and e.value.get("final")):
                # the lease of an attempt expired: the frame made its next attempt
                self._attempts(name, base + (e.attempt or 1) + 1)
                return
            attempt = base + max(1, e.attempt or 1)
            self._attempts(name, attempt)
            self.command(Failed(sid, attempt, str(error.get("type") or "FAILED"), str(error.get("message") or ""),
                                True, at=at))
            return
        if e.kind is not EntryKind.FRAME_COMPLETED:
            return
        answer = e.value if isinstance(e.value, dict) else {"ok": True, "output": e.value}
        attempt = answer["attempt"] if isinstance(answer.get("attempt"), int) else stage["attempts"]
        self._attempts(name, attempt)
        if answer.get("ok", True) is False:
            self.command(Failed(sid, attempt, str(answer.get("errorCode") or "FAILED"),
                                str(answer.get("errorMessage") or ""), answer.get("retryable", True) is not False,
                                details=answer, at=at))
        else:
            self.command(Answered(sid, attempt, answer, at=at))

    def _attempts(self, name: str, attempt: int) -> None:
        """The stage's open attempt is ``attempt`` (a lease that expired inside a frame made one more)."""
        stage = self.state["stages"][name]
        if stage["attempts"] != attempt:
            self.state = {**self.state, "stages": {**self.state["stages"], name: {**stage, "attempts": attempt}}}


def fold(journal: Sequence[Entry], pending: Sequence[tuple[str, int, Any, str | None]] = ()) -> dict[str, Any]:
    """The decider's state of a pipeline of version 1: its journal folded, then ``pending``, the
    messages (channel, seq, payload, at) sent to it and not received yet (of one not ended)."""
    f = Fold()
    for e in journal:
        f.entry(e)
    for channel, seq, payload, at in sorted(pending, key=lambda m: (m[0].endswith(REOPEN), m[1])):
        if seq > f.received.get(channel, 0):
            f.message(channel, seq, payload, at)
    return f.state


async def convert(engine: Engine, eid: str) -> bool:
    """Convert one pipeline of version 1 (see the module's docstring); True once it is the
    decider's (by this call or before), False when it could not be now (try again later)."""
    for attempt in range(TRIES):
        try:
            record = await engine.status(eid)
            if record.version == VERSION:
                return True
            journal = await engine.journal(eid)
            pending: builtins.list[tuple[str, int, Any, str | None]] = []
            if not record.terminal:
                for channel in (CHANNEL, REOPEN):
                    pending += [(m.channel, m.seq, m.payload, m.provenance.at.isoformat())
                                for m in await engine.messages(eid, channel)]
            state = fold(journal, pending)
            if state.get("spec") is None:
                return False
            await engine.adopt(eid, VERSION, state, (journal[-1].seq or 0) if journal else 0)
            return True
        except UnknownExecutionError:
            return True  # archived or deleted: nothing left to run
        except OperationRefused as exc:
            log.info("pipeline execution %s not converted yet (%s)", eid, exc)
            await asyncio.sleep(0.02 * (attempt + 1))
    return False


async def executions_of_version_1(engine: Engine) -> builtins.list[str]:
    """The executions of the pipelines of version 1 that the store lists."""
    out, cursor = [], None
    while True:
        page = await engine.list(workflow=WORKFLOW, limit=500, cursor=cursor)
        out += [s.eid for s in page if s.version != VERSION]
        if page.next is None:
            return out
        cursor = page.next


__all__ = ["REOPEN", "convert", "executions_of_version_1", "fold"]
