"""The workflows that the worker processes of the patterns' crash tests run.

The worker processes import this file as the module ``app`` (FLOWLI_TEST_APP_DIR names its folder)
and run in the test's folder; the test process imports it as part of its test package, only to
start executions by name.

Every effect is one line ``"{subject} {name} {pid}"`` appended to ``effects.txt`` at the END of
its step, so a step that a SIGKILL interrupts leaves no line, and the test counts lines. A step
that holds first appends a line to ``begun.txt`` (the test waits for it to know which worker runs
it), then waits until the file ``release`` exists: the test kills that worker, writes ``release``
and starts another one, which runs the step again and returns at once.
"""

from __future__ import annotations

import asyncio
import os
import time
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import flowli
from flowli.patterns import Action, on_tick, saga

EFFECTS = "effects.txt"
BEGUN = "begun.txt"
RELEASE = "release"
HOLD_TICK = "hold-tick"
"""A file holding the instant (ISO text) of the tick whose child step holds."""

registry = flowli.Registry()


def append_line(path: str | Path, line: str) -> None:
    """Append one line durably: a SIGKILL right after this returns loses nothing."""
    with open(path, "a") as f:
        f.write(line + "\n")
        f.flush()
        os.fsync(f.fileno())


def effect(folder: str, subject: str, name: str) -> None:
    append_line(Path(folder) / EFFECTS, f"{subject} {name} {os.getpid()}")


async def hold(folder: str, subject: str, name: str, seconds: float = 60.0) -> None:
    """Append to ``begun.txt``, then wait until ``release`` exists (bounded)."""
    append_line(Path(folder) / BEGUN, f"{subject} {name} {os.getpid()}")
    deadline = time.monotonic() + seconds
    while not (Path(folder) / RELEASE).exists() and time.monotonic() < deadline:
        await asyncio.sleep(0.02)


# ---- a saga whose second compensation holds ---------------------------------------------------


def reserve_flight(folder: str, trip: str) -> dict[str, Any]:
    effect(folder, trip, "reserve_flight")
    return {"folder": folder, "trip": trip, "booking": f"flight-{trip}"}


def reserve_hotel(folder: str, trip: str) -> dict[str, Any]:
    effect(folder, trip, "reserve_hotel")
    return {"folder": folder, "trip": trip, "booking": f"hotel-{trip}"}


def charge_card(folder: str, trip: str) -> dict[str, Any]:
    raise ValueError(f"card declined for {trip}")


def cancel_hotel(booking: dict[str, Any]) -> str:
    effect(booking["folder"], booking["trip"], "cancel_hotel")
    return f"cancelled {booking['booking']}"


async def cancel_flight(booking: dict[str, Any]) -> str:
    """The second compensation to run: it holds until ``release`` exists, then has its effect."""
    await hold(booking["folder"], booking["trip"], "cancel_flight")
    effect(booking["folder"], booking["trip"], "cancel_flight")
    return f"cancelled {booking['booking']}"


def refund(charge: dict[str, Any]) -> str:
    effect(charge["folder"], charge["trip"], "refund")
    return "refunded"


@registry.workflow("patterns.trip", version="1")
async def trip(ctx: flowli.Context, folder: str, name: str) -> list[Any]:
    """Frames ``root/reserve_flight:0``, ``root/reserve_hotel:1``, ``root/charge_card:2`` (fails),
    then ``root/cancel_hotel:undo-1`` and ``root/cancel_flight:undo-0``."""
    return await saga(ctx, [
        Action(reserve_flight, (folder, name), undo=cancel_flight),
        Action(reserve_hotel, (folder, name), undo=cancel_hotel),
        Action(charge_card, (folder, name), undo=refund),
    ])


# ---- a schedule run by several executions -----------------------------------------------------


async def report(stamp: str) -> str:
    """The step of a tick's child: holds if ``hold-tick`` names its tick; runs in the test folder."""
    folder = os.getcwd()
    held = Path(folder) / HOLD_TICK
    if held.exists() and held.read_text().strip() == stamp:
        await hold(folder, stamp, "report")
    effect(folder, stamp, "report")
    return f"report {stamp}"


@registry.workflow("patterns.tick", version="1")
async def tick(ctx: flowli.Context, stamp: str) -> str:
    return await ctx.step(report, stamp, key="report")


@registry.workflow("patterns.schedule", version="1")
async def schedule(ctx: flowli.Context, start: str, every_seconds: float, ticks: int) -> list[str]:
    """One of several executions of the schedule ``ticks``: all share its start instant."""
    return await on_tick(
        ctx, "patterns.tick", every=timedelta(seconds=every_seconds), schedule="ticks",
        start=datetime.fromisoformat(start), ticks=ticks,
    )
