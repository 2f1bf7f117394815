"""The Store protocol: the narrow surface that every backend implements.

A backend stores, fences and hands out; it holds no engine logic. Every change goes through
:meth:`Store.write`, which applies one :class:`Write` atomically: a worker's journal appends
together with the effects of the frame (messages, tasks, timers, children), fenced by the epoch
of its lease in the same transaction. Backends may apply many writes in one transaction (group
commit) as long as each write stays atomic and isolated from the others.

Time is never read by a backend: every call that needs "now" is given it, so an injected clock
controls timers and leases.
"""

from __future__ import annotations

import dataclasses
import enum
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Callable, Generator, Mapping, Protocol, Sequence, TypeVar

from flowli.domain import Entry, ExecutionRecord, Message, Status, Task, TaskKind, Timer

from ._journal_sql import JournalFilter


@dataclass(frozen=True)
class Fence:
    """The lease that a write requires: ``owner`` holds the lease of ``eid`` at ``epoch``."""

    eid: str
    owner: str
    epoch: int


@dataclass(frozen=True)
class Acquisition:
    """The lease of an execution acquired in the write that resumes it (an answer's): ``owner``
    leases ``eid`` until ``until`` if it is suspended with its lease free and its queue is one of
    ``queues``; its RESUME task ``resume`` is then acked in the same write, so no worker dequeues
    it. Otherwise the write is applied all the same and the RESUME goes through the queue."""

    eid: str
    resume: str
    owner: str
    until: datetime
    queues: tuple[str, ...]
    after: int = 0
    """Read the journal after this seq only (this process holds the rest: see ``Acquired.after``)."""


@dataclass(frozen=True)
class NewItem:
    """An item (see Item) written in a write's transaction, so that a record of a layer above
    commits with the change it belongs to, or not at all. Inserted unless an item of its kind,
    application and key exists; with ``replace``, that item's body is replaced instead. ``id``: a
    number reserved by ``Items.reserve`` (None: the next one). With ``expect`` (and ``replace``),
    the body is replaced only while it is ``expect``: an item changed or gone since it was read
    refuses the whole write with StaleItem, nothing of it applied."""

    kind: str
    application: str
    key: str
    body: Any
    id: int | None = None
    replace: bool = False
    expect: Any = None


@dataclass(frozen=True)
class NewExecution:
    """An execution to create if no execution with its eid exists, with its first entry and task."""

    record: ExecutionRecord
    entry: Entry
    task: Task | None
    """The START task; None when the record is created leased to a worker of the starting process
    (a direct start: that worker runs it at once, and the sweeper recovers it if the lease expires)."""
    items: tuple[NewItem, ...] = ()
    """Items written only when this write creates the execution (a keyed start that finds it
    changes nothing)."""


@dataclass(frozen=True)
class StatusChange:
    eid: str
    status: Status
    result: Any = None
    error: dict[str, Any] | None = None
    blocked: dict[str, Any] | None = None
    version: str | None = None
    """Set the version of the execution (a migration)."""
    touch: bool = True
    """Set the record's ``updated_at`` (False: a change of an ended execution's version only, which
    keeps the instant it ended)."""


@dataclass(frozen=True)
class NewMessage:
    channel: str
    payload: Any
    provenance: Any
    memo: int | None = None
    """Index of an entry of the same write whose value becomes the message's sequence number."""
    application: str | None = None


@dataclass(frozen=True)
class Resume:
    """A RESUME task for an execution, on the queue of that execution (the store reads it)."""

    id: str
    eid: str
    payload: Any
    provenance: Any
    visible_at: datetime


@dataclass(frozen=True)
class Withdrawal:
    task_id: str
    memo: int | None = None
    """Index of an entry of the same write whose value becomes whether a task was removed."""


@dataclass(frozen=True)
class Claim:
    """Put-if-absent of ``key`` for ``owner``."""

    key: str
    owner: str
    memo: int | None = None
    """Index of an entry of the same write whose value becomes whether this claim won."""


@dataclass(frozen=True)
class Announcement:
    entry: Entry
    memo: int | None = None
    """Index of a journal entry of the same write whose value becomes the control-log seq."""


@dataclass(frozen=True)
class WakeCheck:
    """Enqueue ``task`` in the same transaction if a condition of a suspending execution holds
    already: a message past the cursor, a child that ended, a timer that is due. It closes the
    race between a suspension and the send or the end that would resume it."""

    task: Task
    channels: dict[str, int] = field(default_factory=dict)
    children: Sequence[str] = ()
    due_by: datetime | None = None
    journal_after: int | None = None
    """A frame.completed or frame.failed appended past this seq (by a RUN_STEP worker, a
    consumer) to the journal of the fenced execution."""
    frames: Sequence[str] = ()
    """With journal_after: only an outcome of one of these frames counts (the frames the
    execution waits on; the activation's own outcomes past journal_after do not)."""
    cancel: bool = False
    """The fenced execution has a cancel request. (journal_after and cancel look at the
    execution of the write's fence; a wake check without a fence ignores them.)"""


@dataclass(frozen=True)
class TaskHold:
    """The hold on a task that a write requires, checked in its transaction: the write is refused
    with StaleAnswer (and changes nothing) unless the task is still ready and

    - ``owner`` given: leased to that consumer, its lease not expired at the write's instant (an
      answer, a failure);
    - ``expired``: leased, its lease expired at the write's instant (the sweeper ends the attempt);
    - neither: whoever holds it (a timeout ends the attempt).

    The task then ends: ``acked`` (answered), else ``withdrawn``."""

    task_id: str
    owner: str | None = None
    expired: bool = False
    end: str = "acked"


@dataclass(frozen=True)
class Guard:
    """What an operator's write requires of an execution, checked in its transaction: its journal
    still ends at ``last_seq`` (nothing progressed since the caller looked), and no live worker
    holds its lease (none, or expired at the write's instant). Else OperationRefused. The write
    then ends the lease and moves its epoch on, so that a holder that was only paused writes
    nothing more."""

    eid: str
    last_seq: int
    action: str


@dataclass(frozen=True)
class WakeWaiters:
    """Enqueue a RESUME, with id ``RESUME:{eid}:{key}``, for every execution waiting on ``channel``."""

    channel: str
    key: str
    provenance: Any


@dataclass(frozen=True)
class Advance:
    """The state of a decider's execution ``eid`` moved from ``version - 1`` to ``version`` (1:
    created), checked in the write's transaction: refused with StaleState (and nothing of the
    write applied) when the stored version is not ``version - 1``. The compare-and-set that fences a decider's
    commands, as the epoch fences a lease."""

    eid: str
    version: int
    state: Any
    index: StateIndex | None = None
    """The state's index row, written with it (see StateIndex). Version 0 with ``state`` None is
    the row of an execution whose start is not decided yet: inserted by its start when absent,
    and taken over by its first command (version 1)."""
    encoded: str | None = None
    """The state as JSON text when the caller encoded it already (the store writes it as is)."""


HELD: Any = type("Held", (), {"__repr__": lambda self: "HELD"})()
"""What read_state gives in place of a state the caller holds already (see ``held``)."""


@dataclass(frozen=True)
class StateIndex:
    """What lists of a decider's executions filter and order on, computed from its state and
    written in the same write as the state: the read model of lists and inboxes. The words are
    the decider's (``label`` is a status in its vocabulary); the store only compares them."""

    decider: str
    application: str | None = None
    created_at: float = 0.0
    number: int | None = None
    """A numeric id the layer above gave the execution (the order of lists: newest first)."""
    label: str | None = None
    name: str | None = None
    tags: tuple[str, ...] = ()
    """Exact ``key:value`` tags (keywords), matched whole."""
    text: str = ""
    """Lower-case text a search matches a substring of (never a sensitive value)."""
    waiting: int = 0
    """How many decisions of a person the execution waits for (the inbox lists those above 0)."""


@dataclass(frozen=True)
class StateQuery:
    """A page of a decider's executions by their index (see StateIndex): every filter given must
    hold; ``labels`` and ``tags`` match any label of the tuple and every tag of it."""

    decider: str
    application: str | None = None
    labels: tuple[str, ...] = ()
    name: str | None = None
    tags: tuple[str, ...] = ()
    text: str | None = None
    since: float | None = None
    until: float | None = None
    waiting: bool = False
    offset: int = 0
    limit: int = 20
    attempts: bool = False
    """Read each row's open attempts too (``StoredState.attempts``), in the same call."""


@dataclass(frozen=True, slots=True)
class OpenAttempt:
    """An attempt of a decider's delegation not answered yet, as a view of its execution shows
    it: its task, the delegation's key, attempt and payload, and the task's lease (held while
    ``lease_owner`` is set and ``visible_at`` is ahead). Its provenance is not read."""

    task_id: str
    key: str
    attempt: int
    payload: Any
    lease_owner: str | None
    visible_at: datetime

    @classmethod
    def of(cls, task: Task) -> OpenAttempt | None:
        """The open attempt ``task`` is: None unless it is a decider's delegation on its queue."""
        if task.state != "ready":
            return None
        return cls.read(task.id, task.frame, task.payload, task.attempt, task.lease_owner, task.visible_at)

    @classmethod
    def read(cls, task_id: str, frame: Any, payload: Any, attempt: int | None, lease_owner: str | None,
             visible_at: datetime) -> OpenAttempt | None:
        """The open attempt of a ready task's columns: None unless its frame is a decider's."""
        if not isinstance(frame, dict) or not frame.get("decider"):
            return None
        return cls(task_id, frame["key"], attempt or 1, payload, lease_owner, visible_at)


@dataclass(frozen=True)
class StoredState:
    """One row of a StateQuery's page: the execution's record, its state's version and state
    (None before its start is decided) and its label; with ``StateQuery.attempts``, its open
    attempts, in the order of their tasks' visible instants (a leased one's is its lease's end)."""

    record: ExecutionRecord
    version: int
    state: Any
    label: str | None
    attempts: tuple[OpenAttempt, ...] = ()


class Intent(enum.StrEnum):
    """What a write is for, said by the engine that builds it. A backend may apply a write of a
    known intent by a form of its own (PostgreSQL: one statement); a write without an intent, or
    one that a backend has no form for, takes the generic path (``_apply.apply_write``). Both give
    the same rows: the conformance suite runs each intent's fixtures through both paths.

    The shapes each intent promises:

    - ``START``: ``executions`` holds one new execution (with no items), and nothing else is set.
    - ``SIGNAL``: ``expect`` on one execution, one message (no memo), one resume of that
      execution, and nothing else.
    - ``FIRE``: ``fired`` timers and one resume for each, in order, and nothing else.
    - ``APPEND``: entries of the fenced execution under its ``fence``, at most a status change
      of it, its release and its timers and waiters cleared, and nothing else.
    - ``FENCED``: what ``APPEND`` allows, plus timers of the fenced execution and a wake check
      that looks at a due timer and a cancel request only (no channels, children or journal).
    - ``ANNOUNCE``: control-log appends of journal entries (``journal_seq`` set, no memo), and
      nothing else.
    """

    START = "start"
    SIGNAL = "signal"
    FIRE = "fire"
    APPEND = "append"
    FENCED = "fenced"
    ANNOUNCE = "announce"


@dataclass
class Write:
    """One unit of work, applied atomically by :meth:`Store.write`."""

    intent: Intent | None = None
    """What the write is for (see :class:`Intent`); None for any other shape."""
    fence: Fence | None = None
    expect: tuple[str, frozenset[Status]] | None = None
    """Refuse the write (ExecutionStateError) unless the execution has one of these statuses."""
    application: str | None = None
    """With ``expect``: the execution must belong to this application, else the write is refused
    with UnknownExecutionError (an id of another application is unknown, as a missing one)."""
    entries: list[Entry] = field(default_factory=list)
    status: StatusChange | None = None
    release: bool = False
    """Release the fenced lease."""
    cancel_request: tuple[str, dict[str, Any]] | None = None
    executions: list[NewExecution] = field(default_factory=list)
    messages: list[NewMessage] = field(default_factory=list)
    tasks: list[Task] = field(default_factory=list)
    resumes: list[Resume] = field(default_factory=list)
    """Enqueued if no task with the same id exists (an enqueue is idempotent)."""
    acks: list[tuple[str, str | None]] = field(default_factory=list)
    """(task id, lease owner or None): tasks acked; with an owner, only if it still leases it."""
    withdrawals: list[Withdrawal] = field(default_factory=list)
    withdraw_delegates: list[str] = field(default_factory=list)
    """Eids whose ready DELEGATE tasks are withdrawn (a cancelled execution's open delegations)."""
    claims: list[Claim] = field(default_factory=list)
    hold: TaskHold | None = None
    """A task this write requires to be held (see TaskHold); checked before anything is applied."""
    guard: Guard | None = None
    """What the write requires of an execution (see Guard); checked before anything is applied."""
    delete_executions: list[str] = field(default_factory=list)
    """Eids whose live state is deleted: record, journal, scoped channels, tasks, timers (retention)."""
    timers: list[Timer] = field(default_factory=list)
    clear_timers: list[str] = field(default_factory=list)
    """Eids whose timers are deleted."""
    fired: list[Timer] = field(default_factory=list)
    """Timers deleted because a RESUME for them is enqueued."""
    waiters: list[tuple[str, str]] = field(default_factory=list)
    """(channel, eid): the eid waits on the channel until its next clear_waiters."""
    clear_waiters: list[str] = field(default_factory=list)
    wake: WakeCheck | None = None
    wake_waiters: list[WakeWaiters] = field(default_factory=list)
    announcements: list[Announcement] = field(default_factory=list)
    advance: Advance | None = None
    """Advance the state of a decider's execution (see Advance); checked before anything is applied."""
    acquire: Acquisition | None = None
    """Lease the resumed execution to the writer's process (see Acquisition); WriteResult.acquired says."""
    items: list[NewItem] = field(default_factory=list)
    """Items written in this write's transaction (see NewItem), after its checks hold."""
    then: Write | None = None
    """A write of another execution applied after this one in the same transaction: both or
    neither (a child's end with its decider parent's command). Its answer is ``WriteResult.then``."""
    creates: bool = False
    """The write is the creation of ``executions[0]`` with its first command decided: that
    execution is created first, and when its eid exists already nothing of the write applies
    (``WriteResult.created`` is ``[False]``). A keyed start that finds its execution changes
    nothing, whatever its write carries."""

    def put_first(self, entries: list[Entry]) -> None:
        """Put ``entries`` before this write's own, and move every memo (the index of the entry a
        message, a withdrawal, a claim or an announcement fills in) with the entry it names."""
        if not entries:
            return
        n = len(entries)
        self.entries = [*entries, *self.entries]
        self.messages = [_moved(m, n) for m in self.messages]
        self.withdrawals = [_moved(w, n) for w in self.withdrawals]
        self.claims = [_moved(c, n) for c in self.claims]
        self.announcements = [_moved(a, n) for a in self.announcements]


Memo = TypeVar("Memo", NewMessage, Withdrawal, Claim, Announcement)


def _moved(item: Memo, n: int) -> Memo:
    return item if item.memo is None else dataclasses.replace(item, memo=item.memo + n)


_FIELDS: dict[Intent, frozenset[str]] = {
    Intent.START: frozenset({"executions"}),
    Intent.SIGNAL: frozenset({"expect", "application", "messages", "resumes"}),
    Intent.FIRE: frozenset({"fired", "resumes"}),
    Intent.APPEND: frozenset({"fence", "entries", "status", "release", "clear_timers", "clear_waiters"}),
    Intent.FENCED: frozenset({"fence", "entries", "status", "release", "clear_timers", "clear_waiters", "timers", "wake"}),
    Intent.ANNOUNCE: frozenset({"announcements"}),
}


def fits(intent: Intent, w: Write) -> bool:
    """Whether ``w`` has the shape that ``intent`` promises (see :class:`Intent`). For checks and
    tests: the engine sets intents where it builds writes, and backends trust them."""
    parts = {f.name for f in dataclasses.fields(w) if f.name != "intent" and getattr(w, f.name)}
    if not parts <= _FIELDS[intent]:
        return False
    if intent is Intent.START:
        return len(w.executions) == 1 and w.executions[0].entry.kind.lifecycle and not w.executions[0].items
    if intent is Intent.SIGNAL:
        return (w.expect is not None and len(w.messages) == 1 and w.messages[0].memo is None
                and len(w.resumes) == 1 and w.resumes[0].eid == w.expect[0])
    if intent is Intent.FIRE:
        return bool(w.fired) and len(w.fired) == len(w.resumes)
    if intent is Intent.ANNOUNCE:
        return bool(w.announcements) and all(a.entry.journal_seq is not None and a.memo is None
                                             for a in w.announcements)
    f = w.fence
    if f is None:
        return False
    one = (all(e.eid == f.eid for e in w.entries) and (w.status is None or w.status.eid == f.eid)
           and all(x == f.eid for x in w.clear_timers) and all(x == f.eid for x in w.clear_waiters))
    if intent is Intent.APPEND:
        return one and bool(w.entries)
    wake = w.wake
    return one and all(t.eid == f.eid for t in w.timers) and (
        wake is None or not (wake.channels or wake.children or wake.journal_after is not None))


@dataclass(frozen=True)
class WriteResult:
    entry_seqs: list[int]
    entry_values: list[Any]
    """The values of the appended entries, with the memos that the store filled in."""
    message_seqs: list[int]
    created: list[bool]
    """For each NewExecution: whether it was created (False: the eid existed)."""
    woke: bool = False
    acquired: Acquired | None = None
    """With Write.acquire: the lease acquired, the record at its new epoch and the journal (None:
    not acquired, its RESUME is on the queue)."""
    then: WriteResult | None = None
    """The answer of ``Write.then``."""


@dataclass(frozen=True)
class Renewal:
    lost: list[str]
    """Eids whose lease the owner no longer holds."""
    cancel_requested: list[str]
    """Eids of renewed leases whose execution has a cancel request."""


@dataclass(frozen=True)
class Acquired:
    """The answer to an acquisition: ``epoch`` is None when the lease was not acquired (the
    execution is terminal, or another worker holds an unexpired lease)."""

    record: ExecutionRecord | None
    epoch: int | None
    journal: list[Entry]
    after: int = 0
    """The journal holds the entries after this seq only: the acquirer asked for no more (it keeps
    the execution's activation in its workflow cache, which has read the rest)."""


Query = tuple[str, str, tuple[Any, ...]]
"""One statement of a plan: (mode, sql, params), in the dialect of ``_apply`` (``?`` placeholders)."""
Plan = Generator[Query, Any, Any]
"""A generator that yields its statements and receives their results (see ``_apply``)."""


class Views(Protocol):
    """The projection's tables: derived state, fed from the control log by the projectors that the
    layers above register. On SQLite a file of its own beside the database (delete it at will:
    it is rebuilt); on PostgreSQL tables in the database, persistent and shared by every process,
    so that a process that starts does not replay the control log.

    A projector's tables are named ``view_*``; its SQL is written in the dialect both backends
    accept (``?`` placeholders, ``ON CONFLICT``, types TEXT, BIGINT, DOUBLE PRECISION)."""

    async def install(self, name: str, version: int, tables: Sequence[str], schema: Sequence[str]) -> None:
        """Create the tables of projector ``name`` and its cursor, if missing. When the stored
        version differs, drop its ``tables`` and create them again, its cursor at 0."""

    async def cursor(self, name: str) -> int:
        """The control-log seq up to which projector ``name`` has applied the entries."""

    async def advance(self, name: str, entries: Sequence[Entry], plan: Callable[[list[Entry]], Plan]) -> int:
        """In one transaction: lock the cursor of ``name``, drive ``plan`` over the entries past it
        (another process may have applied some), move the cursor to the last entry. Returns the
        number of entries applied."""

    async def read(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        """Rows of a SELECT on the projection's tables."""


@dataclass(frozen=True)
class Item:
    """A named record of a layer above the engine: an application, an API key, a pipeline's
    numeric id, a policy, a schedule. Unique by (kind, application, key); ``id`` is numeric and
    global; ``application`` is "" for an item of no application."""

    id: int
    kind: str
    application: str
    key: str
    body: Any
    at: datetime


class Items(Protocol):
    """The items of a store (see Item): the layers above keep their records here, scoped by
    application, in the same database as the executions, with no schema of their own."""

    async def put(self, kind: str, application: str, key: str, body: Any, now: datetime) -> tuple[Item, bool]:
        """Insert the item unless one of that kind, application and key exists: returns the item
        stored and whether this call created it (exactly one of concurrent callers does)."""

    async def put_many(self, items: Sequence[tuple[str, str, str, Any]], now: datetime) -> list[tuple[Item, bool]]:
        """``put`` of each (kind, application, key, body), in one transaction."""

    async def reserve(self, n: int) -> list[int]:
        """``n`` ids of the items' sequence, for items that a later write inserts (``NewItem.id``):
        an id reserved and never used is only a gap in the numbering, as a sequence's."""

    async def get(self, kind: str, id: int) -> Item | None: ...

    async def find(self, kind: str, key: str, application: str | None = None) -> Item | None:
        """The item of ``kind`` and ``key`` in ``application`` (None: in any; the first by id)."""

    async def list(self, kind: str, application: str | None, *, prefix: str | None = None,
                   newest_first: bool = False, limit: int | None = None, offset: int = 0) -> list[Item]:
        """Items of ``kind`` in ``application`` (None: all), by id, keys starting with ``prefix``."""

    async def count(self, kind: str, application: str | None, *, prefix: str | None = None) -> int: ...

    async def update(self, kind: str, id: int, body: Any, now: datetime, *, expect: Any = None) -> bool:
        """Replace the body of an item; False when there is none, or, with ``expect``, when its
        body is not ``expect`` any more (another writer changed it since it was read)."""

    async def delete(self, kind: str, id: int) -> bool: ...


class Store(Protocol):
    """The storage protocol. Backends: ``flowli.store.sqlite``, ``flowli.store.postgres``."""

    url: str
    notifies: bool
    """Whether the other processes' changes reach ``subscribe`` (PostgreSQL); else they are found
    by polling (SQLite)."""
    announces_in_write: bool
    """Whether a write puts the lifecycle entries it appends on the control log itself, in its
    transaction (SQLite: one writer, so the control log's counter moves in commit order). Else
    (PostgreSQL) they are marked ``unannounced`` and the engine announces them in a second write
    (a counter moved by every write would serialize the writes of all processes); ``unannounced``
    lists those a crash left between the two."""

    async def open(self) -> None:
        """Create or upgrade the schema."""

    async def close(self) -> None: ...

    async def write(self, write: Write, now: datetime) -> WriteResult:
        """Apply ``write`` atomically. Raises LeaseLost when its fence does not hold, and
        ExecutionStateError when its ``expect`` does not; then nothing of it is applied."""

    async def acquire(
        self, eid: str, owner: str, ttl: timedelta, now: datetime, ack: str | None = None
    ) -> Acquired:
        """Acquire the lease of a non-terminal execution that no one holds (or whose lease
        expired): the epoch increases by one. Returns the record and journal. Acks ``ack``
        in the same transaction, whether acquired or not."""

    async def acquire_many(
        self, wanted: Sequence[tuple[str, str]], owner: str, ttl: timedelta, now: datetime,
        after: Mapping[str, int] | None = None,
    ) -> list[Acquired]:
        """``acquire`` of several executions at once: ``wanted`` holds (eid, task id to ack) pairs;
        the answer has one Acquired per pair, in order. An execution not acquired (and a repeat
        of an eid already in ``wanted``) answers Acquired(None, None, []). ``after``: per eid, read
        its journal after that seq only (``Acquired.after``)."""

    async def renew(
        self, owner: str, leases: Sequence[tuple[str, int]], ttl: timedelta, now: datetime
    ) -> Renewal:
        """Extend the leases that ``owner`` still holds at the given epochs and that have not
        expired; an expired one is lost (the sweeper may have handed the execution on)."""

    async def dequeue(
        self,
        queues: Sequence[str],
        kinds: Sequence[TaskKind],
        owner: str,
        limit: int,
        ttl: timedelta,
        now: datetime,
    ) -> list[Task]:
        """Lease up to ``limit`` visible tasks; each stays invisible for ``ttl``. The attempt of a
        frame whose lease expired is not leased again: the sweeper ends it (``expired_tasks``), and
        the frame makes its next attempt, a task of its own."""

    async def nack(self, task_id: str, owner: str | None, delay: timedelta, now: datetime) -> bool:
        """Return a task to its queue, visible after ``delay``."""

    async def renew_task(self, task_id: str, owner: str, ttl: timedelta, now: datetime) -> Task:
        """Extend the lease of a task that ``owner`` holds (ready, leased to it, not expired) to
        ``now + ttl``; returns the task. Raises StaleAnswer when the hold is gone."""

    async def read_task(self, task_id: str) -> Task | None:
        """A task by its id, whatever its state (None when there is no such task)."""

    async def expired_tasks(self, now: datetime, limit: int) -> list[Task]:
        """Ready tasks of frame attempts (``frame`` set) whose consumer's lease expired."""

    async def read_execution(self, eid: str) -> ExecutionRecord | None: ...

    async def read_status(self, eid: str) -> Status | None:
        """An execution's status alone (None: no such execution): what a wait for its end polls."""

    async def read_executions(self, eids: Sequence[str]) -> list[ExecutionRecord]: ...

    async def read_journal(self, eid: str, after: int = 0) -> list[Entry]: ...

    async def read_state(self, eid: str, held: int | None = None) -> tuple[int, Any] | None:
        """The version and state of a decider's execution (None: no command advanced it yet).
        When its version is ``held`` (the caller holds that state already), the state is neither
        sent nor decoded: ``(held, HELD)``."""

    async def read_states(self, query: StateQuery) -> tuple[list[StoredState], int]:
        """A page of decider states by their index, newest first (by number, then creation),
        and how many match the filters in all; with ``query.attempts``, each row's open attempts.
        At most three statements whatever the page's size, in one call of the backend (SQLite:
        one job of its reader thread)."""

    async def read_state_counts(self, query: StateQuery) -> dict[str, int]:
        """How many decider states match ``query`` per label (those with none are left out; its
        page is not read): one statement whatever the number of labels or of states."""

    async def read_states_of(self, eids: Sequence[str]) -> dict[str, tuple[int, Any]]:
        """``read_state`` of many executions in one read: those with a state, by eid."""

    async def read_journal_page(self, eid: str, f: JournalFilter, before: int | None, limit: int,
                                ) -> tuple[list[Entry], int]:
        """The newest ``limit`` entries of a journal below seq ``before`` (None: from the last)
        that ``f`` matches, newest first, and how many entries it matches in all."""

    async def read_messages(self, channel: str, after: int = 0, limit: int = 100) -> list[Message]: ...

    async def read_control_log(self, after: int = 0, limit: int = 1000) -> list[Entry]: ...

    async def read_idle(self, before: datetime, now: datetime, application: str | None,
                        limit: int) -> list[ExecutionRecord]:
        """Executions not ended whose record has not changed since ``before`` and that no timer
        due after ``now`` will wake, oldest first (the candidates of stuck runs)."""

    async def queue_depths(self, now: datetime, application: str | None = None) -> list[tuple[str, int, float]]:
        """Per queue with a task ready to dequeue at ``now``: how many are, and the instant (POSIX
        seconds) since which the oldest of them is (for the metrics; of one application's tasks
        when it is given)."""

    async def read_decider_counts(self) -> list[tuple[str, str | None, str | None, str | None, int]]:
        """How many executions each decider has, per application, index name and label (a
        pipeline's name and status): rows of decider, application, name, label, count."""

    async def read_activity(self, since: datetime, width: float,
                            application: str | None = None) -> list[tuple[str, str | None, int, str, int]]:
        """The runs (executions without a parent) of ``application`` (every one's when None)
        started and ended since ``since``, counted per workflow and name (a decider's index
        name, such as a pipeline's; None for a workflow's runs), per interval of ``width`` seconds from ``since`` (0, 1,
        ...), and per what happened (``started``, ``completed``, ``failed``, ``cancelled``)."""

    batch_sizes: dict[int, int]
    """How many batches of each size this store's writers committed (its group commit)."""

    async def read_tasks(
        self, queue: str | None = None, eid: str | None = None, include_acked: bool = False
    ) -> list[Task]: ...

    async def read_timers(self, eid: str | None = None) -> list[Timer]: ...

    async def due_timers(self, now: datetime, limit: int) -> list[Timer]: ...

    async def expired_leases(self, now: datetime, limit: int) -> list[ExecutionRecord]:
        """Running executions whose lease expired: their worker is presumed dead."""

    async def unannounced(self, before: datetime, limit: int) -> list[Entry]:
        """Lifecycle journal entries appended before ``before`` and not yet appended to the
        control log (a worker crashed between the two appends), each until it is announced."""

    async def waiters(self, channel: str) -> list[str]: ...

    async def finished_before(self, before: datetime, limit: int) -> list[str]:
        """Eids of terminal executions last changed at or before ``before`` whose lifecycle
        entries are all on the control log (for retention)."""

    async def read_scoped_messages(self, eid: str) -> list[Message]:
        """Every message of the execution-scoped channels of ``eid`` (``{eid}.*``)."""

    async def next_wake(self, now: datetime) -> datetime | None:
        """The earliest instant at which a timer is due (perhaps already) or a task becomes
        visible after ``now`` (a delayed one, or a dequeued one at the end of its lease). A task
        visible already is not counted: the workers dequeue it, nobody needs to wake for it."""

    async def claim(self, key: str, owner: str, now: datetime) -> bool:
        """Put-if-absent: exactly one caller for ``key`` wins."""

    async def register_worker(
        self, worker_id: str, kind: str, queues: Sequence[str], now: datetime,
        workflows: dict[str, list[str]] | None = None,
    ) -> None:
        """Write (or renew) the row of a running worker: its kind, the queues it serves, the
        versions of the workflows it runs."""

    async def read_workers(self, seen_after: datetime) -> list[dict[str, Any]]:
        """The workers seen after ``seen_after``: id, kind, queues, workflows, started_at, seen_at."""

    def views(self) -> Views:
        """The projection's tables of this store (see Views)."""

    def items(self) -> Items:
        """The items of this store (see Item)."""

    async def watch(self, eid: str, until: datetime) -> None:
        """Ask that appends to the journal of ``eid`` notify the other processes until ``until``
        (``subscribe`` then calls back ``"journal:{eid}"``). A backend that cannot notify does
        nothing: watchers find those appends by their slow poll."""

    def subscribe(self, callback: Callable[[str], None]) -> None:
        """Call ``callback("work")`` when another process enqueued a task visible now, and
        ``callback("timer")`` when it set a timer or enqueued a task visible later, or when the
        backend may have missed notifications (PostgreSQL: LISTEN/NOTIFY). A backend that cannot
        tell never calls it; workers then find such work by their slow poll."""
