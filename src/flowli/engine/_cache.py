"""The workflow cache: activations kept after they suspend, so that the next activation of the
same execution in this process continues the workflow's coroutine where it waits instead of
replaying its journal from the first line.

A replay costs what the journal holds: a workflow of 2,000 rounds of ``receive`` replays 2,000
frames to take its 2,001st message. A kept activation holds the coroutine suspended in its waits,
its memo and its frame ids; the next activation reads only the entries after the last seq it saw
(``Acquired.after``) and continues when they are its own writes and outcomes of the frames it
waits on (``Activation.resume``). Anything else (another process advanced the journal, a
migrate, a cancel, a retry, a block) discards it and replays as without a cache. An activation
is kept only between its suspension's write and its next lease: it holds no lease meanwhile,
and nothing it runs can write (its replay is closing).

Bounded by count (``Options.workflow_cache``) and by an estimate of the memory held
(``Options.workflow_cache_memory``: ``ENTRY_BYTES`` per journal entry its memo holds); the
least recently kept goes first, and replays when its execution resumes.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass
from typing import Protocol

ENTRY_BYTES = 1536
"""What a journal entry held by a kept activation's memo costs, on the high side: with tracemalloc,
the memory freed by discarding 40 kept runs of 30 rounds (a step with a small dict, a receive)
came to 1,254 bytes per entry counted, coroutines and frames included."""


@dataclass(frozen=True)
class CacheFigures:
    """What one process's workflow cache holds and did (``Engine.workflow_cache``, the metrics)."""

    runs: int
    """Suspended runs kept."""
    bytes: int
    """The memory they hold, estimated."""
    hits: int
    """Activations that continued a kept run (no replay)."""
    misses: int
    """Kept runs found unfit to continue (another process moved the journal on, a migrate, a
    cancel): discarded, and their run replayed."""
    evictions: int
    """Kept runs let go to stay within the bounds."""


class Keepable(Protocol):
    def weight(self) -> int:
        """The journal entries its memo holds."""
        ...

    def discard(self) -> None:
        """Stop its coroutine and frames (nothing of it writes: its replay is closing)."""
        ...


class WorkflowCache:
    """The kept activations of one process, by execution id, least recently kept first."""

    def __init__(self, size: int, memory: int):
        if size < 0 or memory < 0:
            raise ValueError(f"the workflow cache takes sizes of 0 or more, got {size} executions, {memory} bytes")
        self.size = size
        self.memory = memory
        self._kept: OrderedDict[str, tuple[Keepable, int, int]] = OrderedDict()
        """eid -> (activation, the last seq its memo holds, its weight in bytes)."""
        self.held = 0
        """Bytes held by the kept activations, estimated."""
        self.hits = 0
        """Activations that continued a kept one."""
        self.misses = 0
        """Kept activations found unfit to continue (discarded; their execution replayed)."""
        self.evictions = 0

    def figures(self) -> CacheFigures:
        return CacheFigures(len(self._kept), self.held, self.hits, self.misses, self.evictions)

    def __len__(self) -> int:
        return len(self._kept)

    def __contains__(self, eid: str) -> bool:
        return eid in self._kept

    def horizon(self, eid: str) -> int:
        """The last seq of the journal that the activation kept for ``eid`` holds (0: none kept)."""
        kept = self._kept.get(eid)
        return 0 if kept is None else kept[1]

    def keep(self, eid: str, activation: Keepable, horizon: int) -> None:
        """Keep ``activation`` of ``eid`` (suspended: its journal up to ``horizon`` written)."""
        if not self.size:
            activation.discard()
            return
        self.drop(eid)
        weight = activation.weight() * ENTRY_BYTES
        self._kept[eid] = (activation, horizon, weight)
        self.held += weight
        while self._kept and (len(self._kept) > self.size or self.held > self.memory):
            oldest = next(iter(self._kept))
            self.drop(oldest)
            self.evictions += 1

    def take(self, eid: str) -> Keepable | None:
        """The activation kept for ``eid``, no longer kept (None: none)."""
        kept = self._kept.pop(eid, None)
        if kept is None:
            return None
        self.held -= kept[2]
        return kept[0]

    def drop(self, eid: str) -> None:
        """Discard the activation kept for ``eid``, if any."""
        kept = self.take(eid)
        if kept is not None:
            kept.discard()

    def clear(self) -> None:
        for eid in list(self._kept):
            self.drop(eid)
