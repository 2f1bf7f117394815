"""The primitives that every part of an activation uses: the exceptions that end one (a closing
activation, a stopping worker, a failing store), a store call, the failure a frame raises in the
workflow, and the stored name of a channel. An activation is composed of its replay
(``_replay``), its writer (``_writer``), its steps (``_steps``) and its waits (``_waits``);
``_activation`` drives it.
"""

from __future__ import annotations

import asyncio
from typing import Awaitable, TypeVar

from flowli.domain import Entry, LeaseLost, StepFailed
from flowli.domain import FlowliError as FlowliErrorBase
from flowli.store import Intent, Write

from ._context import Scope

T = TypeVar("T")


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


def channel_name(eid: str, application: str | None, channel: str, scope: Scope) -> str:
    """The stored name of a channel of execution ``eid``: its own (``{eid}.{channel}``) or a
    global one of its application."""
    if scope == "execution":
        return f"{eid}.{channel}"
    if scope == "global":
        return global_channel(channel, application)
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
