"""What the activations, the worker, the sweeper and the Engine share in one process."""

from __future__ import annotations

import collections
import logging
import os
import socket
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from flowli.domain import Actor, Code, Entry, Principal, Provenance, Site, new_eid
from flowli.log import Bucket
from flowli.store import Store

from ._announcer import Announcer
from ._cache import WorkflowCache
from ._clock import Clock
from ._handoff import Polls
from ._interceptors import Interceptors
from ._registry import Registry
from ._slots import Slots
from ._tracing import Tracing
from ._turns import Turns
from ._wakeups import LOG as LOG
from ._wakeups import WORK as WORK
from ._wakeups import Wakeups

log = logging.getLogger("flowli.engine")


SWEEPER = Principal("sweeper", "system", trusted=True)
"""The principal of the sweeper's transitions (fired timers, recoveries, retention)."""

@dataclass(frozen=True)
class Options:
    """Tuning of an engine. The defaults suit production; tests shorten them."""

    lease_ttl: timedelta = timedelta(seconds=30)
    """How long a lease lasts without renewal; a dead worker's executions recover after it."""
    task_ttl: timedelta = timedelta(seconds=30)
    """How long a dequeued task stays invisible to other workers."""
    poll_interval: float = 0.5
    """Seconds between polls of the store when idle (other processes enqueue unseen)."""
    sweep_interval: float = 1.0
    schedule_interval: float = 1.0
    """How often a worker with a sweeper looks for due schedules (a firing is at most this late)."""
    """Seconds between sweeps at most; due timers wake the sweeper sooner."""
    repair_grace: timedelta = timedelta(seconds=5)
    """How old a lifecycle entry missing from the control log must be before the sweeper repairs it."""
    retention: timedelta = timedelta(days=30)
    """How long after it finished an execution keeps its live state before it is archived."""
    retention_interval: float = 3600.0
    """Seconds between retention passes (each worker's sweeper runs them)."""
    grace: float = 30.0
    """Seconds a stopping worker (SIGTERM, Ctrl-C, the end of ``engine.worker()``) waits for the
    steps under way to finish; each execution is handed back at its next frame, and what still
    runs after the grace is handed back as it is."""
    delegate_expiries: int = 3
    """How many times the leases of a DELEGATE frame's attempts may expire (a consumer that died or
    stalled) before the frame fails with LEASE_EXPIRED: a poison task cannot loop forever."""
    workflow_cache: int = 512
    """How many suspended executions this process keeps as live coroutines (the workflow cache,
    see ``_cache``): the next activation of one continues it instead of replaying its journal.
    0 turns the cache off."""
    workflow_cache_memory: int = 256 * 2**20
    """The bytes that the kept executions may hold, estimated from their journals; past it, the
    least recently kept ones go (and replay when they resume)."""
    bucket: str = "flowli-bucket"
    """The directory of evidence (attempt logs, attachments); ``flowli.connect`` puts it beside a
    SQLite file."""


@dataclass
class Stats:
    """Counters of one engine's process, read by ``flowli.metrics`` at each scrape."""

    attempts: collections.Counter[str] = field(default_factory=collections.Counter)
    """Step attempts run in this process, by workflow."""
    failures: collections.Counter[str] = field(default_factory=collections.Counter)
    """Step attempts that failed, by workflow."""
    recoveries: int = 0
    """Executions whose expired lease this process's sweeper recovered."""
    sweeps: int = 0
    timer_lag: float = 0.0
    """Seconds between the due instant of the latest timer the sweeper fired and its firing."""


class Runtime:
    """The store, registry and clock of one process, and its in-process wake-ups."""

    def __init__(self, store: Store, registry: Registry, clock: Clock, options: Options):
        self.store = store
        self.registry = registry
        self.clock = clock
        self.options = options
        self.bucket = Bucket(options.bucket)
        self.host = socket.gethostname()
        self.pid = os.getpid()
        self.owner = f"{self.host}:{self.pid}:{new_eid()[-12:]}"
        self.wakeups = Wakeups()
        """Who waits for a change here, and the store's notifications of other processes' changes."""
        store.subscribe(self.wakeups.notified)
        self.announcer = Announcer(store, clock, self.wakeups.hub)
        """The control-log appends of this process (the second append)."""
        self.interceptors = Interceptors()
        """The middleware (``engine.use``) and the observers (``engine.observe``) of its transitions."""
        self.tracing: Tracing | None = None
        """OpenTelemetry spans of executions, activations and attempts; None when off."""
        self.stats = Stats()
        """What this process did, counted for the metrics (plain counters: no cost to speak of)."""
        self.principal = Principal(self.owner, "worker", trusted=True)  # the engine's own actor
        """The principal of what this process's workers and sweeper do on their own."""
        self.polls = Polls(store, clock, self.wakeups.hub)
        """The long polls of this process's consumers, and the tasks handed to one that went away
        (see ``_handoff``)."""
        self.turns = Turns()
        """The commands of this process for each decider execution (see ``_turns``)."""
        self.ends: dict[str, Any] = {}
        """Per decider parent: the ends of its children gathered for its next command (``_ends``)."""
        self.cache = WorkflowCache(options.workflow_cache, options.workflow_cache_memory)
        """The suspended activations kept to continue without a replay (see ``_cache``)."""
        self.slots = Slots()
        """The free slots of this process's workers (the Engine enters each while it runs): a start,
        an answer or a child started here runs in one at once, without the queue."""

    def provenance(
        self,
        *,
        actor: Actor | None = None,
        epoch: int | None = None,
        code: Code | None = None,
        attempt: int | None = None,
        on_behalf_of: str | None = None,
        at: datetime | None = None,
    ) -> Provenance:
        return Provenance(
            actor=actor or Actor("worker", self.owner),
            site=Site(host=self.host, pid=self.pid, worker=self.owner, epoch=epoch),
            code=code or Code(),
            at=at or self.clock.now(),
            attempt=attempt,
            on_behalf_of=on_behalf_of,
        )



def entries_with_seqs(entries: list[Entry], seqs: list[int]) -> list[Entry]:
    return [Entry(**{**e.__dict__, "seq": s}) for e, s in zip(entries, seqs)]
