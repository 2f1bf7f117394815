"""A dry replay: a workflow function run against an execution's journal in memory, writing nothing
and running no step, to tell whether (a version of) the code still replays it.

Every frame with a memo returns it, as in a replay; the first frame without one is the frontier:
it does not run, it only waits. When the function can go no further, the replay has met the
journal up to the frontier, and the checks of a real replay decide: a changed kind or argument
digest, a frame the journal does not hold created ahead of frames it holds, a frame the journal
holds that the code never created. ``flowli migrate`` checks the target version with it.
"""

from __future__ import annotations

import asyncio
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Awaitable

from flowli.domain import ArgumentsInvalid, Entry, ExecutionRecord, NondeterminismError

from ._activation import Activation
from ._registry import WorkflowDef
from ._replay import Replay
from ._runtime import Runtime
from ._tasks import cancel_and_wait

_QUIET_TURNS = 20
"""Turns of the event loop with no new frame after which the function can go no further."""


@dataclass(frozen=True)
class Divergence:
    """Where a replay of the code leaves the journal: the frame and why (and, for changed
    arguments, the recorded and the current ones)."""

    fid: str
    detail: str
    recorded: Any = None
    current: Any = None
    site: str | None = None
    """Where the code creates the frame (``file:line in function``), when it does."""


class DryFrames(Replay):
    """The frames of a dry replay: each frame without a memo waits for ever (it never runs), and
    the call site of each frame the code creates is kept."""

    def __init__(self, eid: str, journal: list[Entry], cancel_requested: bool):
        super().__init__(eid, journal, cancel_requested)
        self.frontier: list[str] = []
        self.held_new: list[tuple[str, str]] = []
        self.sites: dict[str, str] = {}
        """The call site of each frame the code created (the first stack frame outside flowli)."""

    def frame(self, name: str, key: str | None, kind: Any, dig: str, args: Any = None) -> tuple[str, Entry | None]:
        site = call_site()
        try:
            return super().frame(name, key, kind, dig, args)
        finally:
            if self.ids.created and site is not None:
                self.sites.setdefault(self.ids.created[-1], site)

    def spawn(self, coro: Awaitable[Any]) -> asyncio.Future[Any]:
        close = getattr(coro, "close", None)
        if close is not None:
            close()  # never run: a dry replay runs no frame
        gate, self.next_gate = self.next_gate, None
        if gate is not None:
            self.held_new.append(gate)
        self.frontier.append(self.ids.created[-1])
        return asyncio.get_running_loop().create_future()  # it waits for ever


class DryReplay(Activation):
    """An activation that writes nothing and runs no frame: each frame without a memo waits."""

    replay: DryFrames

    def __init__(self, rt: Runtime, wf: WorkflowDef, record: ExecutionRecord, journal: list[Entry]):
        super().__init__(rt, wf, record, record.lease_epoch, journal, replay=DryFrames)

    async def check(self) -> Divergence | None:
        try:
            args = self.typed_arguments()
        except ArgumentsInvalid as bad:  # the new code's types refuse the journal's arguments
            return Divergence("root", str(bad))
        task: asyncio.Task[Any] = asyncio.create_task(self.wf.fn(self, *args))
        replay = self.replay
        quiet, seen = 0, -1
        while not task.done() and quiet < _QUIET_TURNS:
            await asyncio.sleep(0)
            created = len(replay.ids.created)
            quiet = quiet + 1 if created == seen else 0
            seen = created
        await cancel_and_wait([task])
        if replay.nondeterminism is None and replay.held_new and replay.unmet:
            new, ahead = replay.held_new[0]
            replay.nondeterminism = NondeterminismError(
                self.eid, new, f"the code creates frame {new}, which the journal does not hold, before frame {ahead},"
                " which the journal holds from an earlier run: code was inserted or frames were reordered or renamed")
        if replay.nondeterminism is None:
            replay.check_all_visited()
        nd = replay.nondeterminism
        if nd is None:
            return None
        return Divergence(nd.fid, nd.detail, replay.diverged.get("recorded"), replay.diverged.get("current"),
                          replay.sites.get(nd.fid))


_NOT_THE_CODE = (str(Path(__file__).resolve().parents[1]) + os.sep, str(Path(asyncio.__file__).parent) + os.sep, "<")
"""flowli's own package, asyncio's, and frozen modules: never a workflow's call site."""


def call_site() -> str | None:
    """``file:line in function`` of the innermost stack frame of the workflow's own code (none
    for a frame that flowli's own workflows create, such as a composition's steps)."""
    frame = sys._getframe(2)
    while frame is not None:
        path = frame.f_code.co_filename
        if not path.startswith(_NOT_THE_CODE):
            return f"{path}:{frame.f_lineno} in {frame.f_code.co_name}"
        frame = frame.f_back  # type: ignore[assignment]
    return None


async def dry_replay(rt: Runtime, wf: WorkflowDef, record: ExecutionRecord, journal: list[Entry]) -> Divergence | None:
    """Whether ``wf`` replays the journal of ``record`` (None), or where it leaves it."""
    return await DryReplay(rt, wf, record, journal).check()


async def inspect(rt: Runtime, wf: WorkflowDef, record: ExecutionRecord, journal: list[Entry]) -> Any:
    """What the workflow function exposes (``Context.expose``) when replayed in memory against
    ``journal`` as far as it goes: its own view of the run, replayed, never reconstructed. A cancel
    request is not in the journal: the replay goes as far as the journal does, so a cancelled run
    shows what it had done, not the state it started from."""
    dry = DryReplay(rt, wf, record, journal)
    dry.replay.cancel_requested = False
    await dry.check()
    return dry.exposed
