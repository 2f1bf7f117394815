"""The ends of a decider parent's children, written with its command: one store write holds a
child's end and the parent's ``ChildEnded`` (``Transition.then``), so no RESUME task goes between
them. Children of one parent that end here at about the same time (the steps of a composition's
layer, whose frames one write returned to all of them) are taken together: the parent decides
their ends one after another in one command of its own, and that write holds every child's end
too. The parent's state is then read, decided from, encoded and written once for all of them,
and the layer's ends are one transaction instead of one each, each fenced on the version the one
before it wrote.

How they gather: the first end of a parent waits for its turn (``Runtime.turns``), after letting
the callbacks of the same loop iteration run; every end of that parent that comes meanwhile joins
it. When the turn comes, the first end decides and writes them all (``apply_in_turn``), in their
order of arrival. An end the write did not take (the parent ended with an earlier one of them), or
all of them when the write failed (a middleware refused the parent's command, a child's lease was
lost, the store failed), is written by its activation alone, with the RESUME that tells the parent
(a child's lost lease is raised there, by its own write)."""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field
from typing import Any

from flowli.domain import ExecutionRecord
from flowli.store import Write, WriteResult

from ._core import store_call
from ._deciding import apply_in_turn, child_ended
from ._runtime import Runtime
from ._transitions import Transition, commit
from ._writer import Writer

log = logging.getLogger("flowli.engine")


@dataclass
class Ending:
    """The end of a decider's child: its record as it ends, and its end's write with the writer
    that commits it under the child's fence."""

    child: ExecutionRecord
    writer: Writer
    write: Write
    payload: Any


@dataclass
class _Gathered:
    """The ends of one parent waiting for its turn: each but the first with the future its
    activation waits on (whether its end was written with the parent's command)."""

    endings: list[Ending]
    told: list[asyncio.Future[bool]] = field(default_factory=list)


async def end_with_parent(rt: Runtime, ending: Ending) -> bool:
    """Write ``ending`` with its parent's command, together with the other ends of that parent
    that come meanwhile: whether it was written. When it was not, nothing of it was written."""
    parent = ending.child.parent_eid
    assert parent is not None
    joining: _Gathered | None = rt.ends.get(parent)
    if joining is not None:  # the first end of this parent takes this one too
        told: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        joining.endings.append(ending)
        joining.told.append(told)
        return await told
    gathered = rt.ends[parent] = _Gathered([ending])
    taken = 0
    try:
        await asyncio.sleep(0)  # the ends of this loop iteration join
        async with rt.turns.turn(parent):
            del rt.ends[parent]  # those that come from now on gather for the next turn
            taken = await _write(rt, parent, gathered.endings)
    except Exception as exc:  # noqa: BLE001 - each end goes alone; its RESUME gives the parent the rest
        log.info("the ends of %s go alone, not with their parent %s's command (%s: %s)",
                 ", ".join(e.child.eid for e in gathered.endings), parent, type(exc).__name__, exc)
    finally:
        if rt.ends.get(parent) is gathered:  # it ended before its turn came (cancelled)
            del rt.ends[parent]
        for i, waiting in enumerate(gathered.told, start=1):
            if not waiting.done():
                waiting.set_result(i < taken)
    return taken > 0


async def _write(rt: Runtime, parent: str, endings: list[Ending]) -> int:
    """Decide the ends of ``endings`` in one command of ``parent`` and commit it with their end
    writes: how many of them it took (0 when the parent ended before)."""
    written: list[int] = []

    async def joined(t: Transition, n: int) -> WriteResult:
        # the children's ends first (each under its fence), then the parent's transition
        head = t
        for e in reversed(endings[:n]):
            e.write.intent = None  # a joined write has no one-statement form
            link = e.writer.transition(e.write, kind="end", final=True, payload=e.payload, then=head)
            assert link is not None  # an end is never a plain append
            head = link
        answer: WriteResult | None = await store_call(commit(rt, head))
        for e in endings[:n]:
            assert answer is not None
            e.writer.settle(e.write, answer)
            answer = answer.then
        assert answer is not None
        written.append(n)
        return answer

    children = [e.child.eid for e in endings]
    payload = {"command": "ChildEnded", **({"child": children[0]} if len(children) == 1 else {"children": children})}
    await apply_in_turn(rt, parent, [child_ended(e.child) for e in endings], kind="decide", base=Write,
                        principal=rt.principal, payload=payload, joined=joined)
    return written[-1] if written else 0
