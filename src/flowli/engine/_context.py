"""The Context: what a workflow function sees. The replay machinery implements it."""

from __future__ import annotations

import abc
import contextlib
from collections.abc import Iterable, Iterator
from contextvars import ContextVar
from datetime import datetime, timedelta
from typing import Any, Awaitable, Callable, Literal, ParamSpec, TypeVar

from flowli.domain import RetryPolicy, TaskKind

P = ParamSpec("P")
T = TypeVar("T")
Scope = Literal["execution", "global"]


GROUP: ContextVar[str | None] = ContextVar("flowli_frame_group", default=None)
"""The label of the frames being created (``Context.group``)."""


class Context(abc.ABC):
    """The handle of one execution, given to its workflow function as the first argument.

    Each method but :meth:`gather` creates exactly one frame when it is called (not when it is
    awaited), so frame ids do not depend on the order in which concurrent frames complete.
    """

    @contextlib.contextmanager
    def group(self, label: str) -> Iterator[None]:
        """Label the frames created inside the block (their frame.started says so), so that views
        of the run show them together under ``label``: a pattern's frames under the pattern. It
        changes no frame id and no digest."""
        token = GROUP.set(label)
        try:
            yield
        finally:
            GROUP.reset(token)

    exposed: Any = None
    """What the workflow last passed to :meth:`expose`."""

    def expose(self, value: Any) -> None:
        """Make ``value`` (the workflow's own state: a pipeline's stages) what ``engine.inspect``
        returns. It creates no frame and writes nothing: ``engine.inspect`` replays the journal in
        memory and reads what the replay exposed when it could go no further."""
        self.exposed = value

    @property
    @abc.abstractmethod
    def eid(self) -> str:
        """The eid of this execution."""

    @property
    @abc.abstractmethod
    def workflow(self) -> str: ...

    @property
    @abc.abstractmethod
    def version(self) -> str: ...

    @property
    @abc.abstractmethod
    def application(self) -> str | None:
        """The application (tenant) the execution belongs to; None for single-tenant use."""

    @property
    @abc.abstractmethod
    def items(self) -> Any:
        """The store's items (``flowli.store.Items``): the named records of the layers above. A
        workflow reads and writes them inside a step only (they are not journaled)."""

    @abc.abstractmethod
    def step(
        self,
        fn: Callable[P, Awaitable[T]] | Callable[P, T],
        /,
        *args: Any,
        key: str | None = None,
        retry: RetryPolicy | None = None,
        queue: str | None = None,
        **kwargs: Any,
    ) -> Awaitable[T]:
        """Run ``fn(*args, **kwargs)`` one time for the life of the execution and memoize its
        value, which must be JSON-compatible. A sync ``fn`` runs off the event loop. With
        ``queue``, a worker of that queue runs it (a RUN_STEP task)."""

    @abc.abstractmethod
    def child(self, workflow: str | Callable[..., Any], /, *args: Any, key: str | None = None) -> Awaitable[Any]:
        """Start a child execution of ``workflow`` and wait for its result."""

    @abc.abstractmethod
    def receive(self, channel: str, scope: Scope = "execution", *, timeout: timedelta | None = None) -> Awaitable[Any]:
        """Wait for the next message on a channel and return its payload. With ``timeout``, the
        built-in TimeoutError is raised when no message came within it (the wait holds no worker)."""

    @abc.abstractmethod
    def delegate(
        self, queue: str, payload: Any, *, key: str | None = None, retry: RetryPolicy | None = None,
        timeout: timedelta | None = None,
    ) -> Awaitable[Any]:
        """Put a DELEGATE task on ``queue`` for a consumer outside the engine (a service, an agent,
        a person's tool) and wait, holding no worker, for its answer, which this returns.

        Each attempt is its own task: the consumer renews its lease, answers or fails it. A failed
        attempt is retried as ``retry`` says (as for a step; none by default), an attempt whose
        lease expired is made again at once (up to ``Options.delegate_expiries`` times, then the
        frame fails with LEASE_EXPIRED), and an answer to an attempt that is not current is refused
        (StaleAnswer). With no attempt left, StepFailed is raised; with ``timeout``, TimeoutError
        when no answer came within it. The awaitable has the frame id as ``.fid``."""

    @abc.abstractmethod
    def sleep(self, delay: timedelta) -> Awaitable[None]:
        """Wait for ``delay``; the execution holds no worker meanwhile."""

    @abc.abstractmethod
    def sleep_until(self, instant: datetime) -> Awaitable[None]:
        """Wait until ``instant`` (an aware datetime)."""

    @abc.abstractmethod
    async def gather(self, *awaitables: Awaitable[Any]) -> list[Any]:
        """Await frames at the same time; the execution suspends only when all of them wait."""

    @abc.abstractmethod
    async def first(self, pending: Iterable[Awaitable[Any]]) -> Awaitable[Any]:
        """Wait until at least one of ``pending`` (the awaitables of delegate, receive, sleep and
        child frames) has its outcome, and return that awaitable (await it for its value); when
        several have one, the one whose outcome the journal holds first. A replay therefore returns
        the same sequence of frames as the first run, whatever order the outcomes arrive in during
        it: a workflow that handles one event at a time (a pipeline's stage results and operator
        actions) stays deterministic. The others keep waiting; pass them again."""

    @abc.abstractmethod
    def now(self) -> Awaitable[datetime]:
        """The current instant, as a memoized step."""

    @abc.abstractmethod
    def random(self) -> Awaitable[float]:
        """A random float in [0, 1), as a memoized step."""

    @abc.abstractmethod
    def uuid(self) -> Awaitable[str]:
        """A random UUID, as a memoized step."""

    @abc.abstractmethod
    def send(self, channel: str, payload: Any, scope: Scope = "execution") -> Awaitable[int]:
        """Send one message on a channel; returns its sequence number."""

    @abc.abstractmethod
    def announce(self, kind: str, data: Any) -> Awaitable[int]:
        """Append one entry to the control log; returns its sequence number."""

    @abc.abstractmethod
    def enqueue(
        self, queue: str, kind: TaskKind | str, payload: Any, key: str | None = None
    ) -> Awaitable[str]:
        """Enqueue one task; returns its task id."""

    @abc.abstractmethod
    def withdraw(self, task_id: str) -> Awaitable[bool]:
        """Remove a task from its queue; returns whether a task was removed."""

    @abc.abstractmethod
    def claim(self, key: str) -> Awaitable[bool]:
        """Put-if-absent of ``key`` across all executions: exactly one caller wins (True)."""
