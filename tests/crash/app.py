"""The workflows that the crash tests' worker processes run.

The worker processes import this file as the module ``app`` (it sits beside ``worker_main.py``);
the test process imports it as part of its test package, only to start executions by name.

Each step appends one line ``"{eid} {step-name} {pid}"`` to ``effects.txt`` at its end (the
effect whose count the tests check), and returns ``"{step-name}:{pid}"``, so the result of an
execution tells which process ran each step. The ``hold`` step first appends a line to
``begun.txt`` (the test waits for it to know where the execution is), then waits until the file
``release`` exists or its time is up: the test writes ``release`` before it starts the worker
that must finish quickly.
"""

from __future__ import annotations

import asyncio
import os
import time
from datetime import timedelta
from pathlib import Path

import flowli

EFFECTS = "effects.txt"
BEGUN = "begun.txt"
RELEASE = "release"

registry = flowli.Registry()


def append_line(path: str | Path, line: str) -> None:
    """Append one line durably: a SIGKILL right after this returns loses nothing."""
    with open(path, "a") as f:
        f.write(line + "\n")
        f.flush()
        os.fsync(f.fileno())


async def effect(eid: str, name: str, work_dir: str, pause: float) -> str:
    await asyncio.sleep(pause)
    append_line(Path(work_dir) / EFFECTS, f"{eid} {name} {os.getpid()}")
    return f"{name}:{os.getpid()}"


async def hold(eid: str, name: str, work_dir: str, seconds: float) -> str:
    folder = Path(work_dir)
    append_line(folder / BEGUN, f"{eid} {name} {os.getpid()}")
    deadline = time.monotonic() + seconds
    while not (folder / RELEASE).exists() and time.monotonic() < deadline:
        await asyncio.sleep(0.02)
    append_line(folder / EFFECTS, f"{eid} {name} {os.getpid()}")
    return f"{name}:{os.getpid()}"


@registry.workflow("crash.steps", version="1")
async def steps(
    ctx: flowli.Context,
    work_dir: str,
    names: list[str],
    hold_at: str | None = None,
    hold_seconds: float = 30.0,
    pause: float = 0.0,
) -> list[str]:
    """Sequential steps, one per name (frame ids ``root/effect:{name}``, ``root/hold:{name}``)."""
    values = []
    for name in names:
        if name == hold_at:
            values.append(await ctx.step(hold, ctx.eid, name, work_dir, hold_seconds, key=name))
        else:
            values.append(await ctx.step(effect, ctx.eid, name, work_dir, pause, key=name))
    return values


@registry.workflow("crash.wait", version="1")
async def wait_then_step(ctx: flowli.Context, work_dir: str) -> str:
    """Suspends on a receive; the signal resumes it, and a step runs (frame ``root/effect:after``)."""
    await ctx.receive("go")
    return await ctx.step(effect, ctx.eid, "after", work_dir, 0.0, key="after")


@registry.workflow("crash.nap", version="1")
async def nap_then_step(ctx: flowli.Context, work_dir: str, seconds: float) -> str:
    """Sleeps (a timer that a sweeper fires), then one step (frame ``root/effect:after``)."""
    await ctx.sleep(timedelta(seconds=seconds))
    return await ctx.step(effect, ctx.eid, "after", work_dir, 0.0, key="after")


@registry.workflow("crash.delegated", version="1")
async def delegated(ctx: flowli.Context, subject: str) -> object:
    """One DELEGATE frame (``root/delegate:work``) on the queue ``crash-consumers``: a consumer
    process answers it, or dies holding it."""
    return await ctx.delegate("crash-consumers", {"subject": subject}, key="work")


STARTS = "starts.txt"


@registry.workflow("crash.rounds", version="1")
async def rounds(ctx: flowli.Context, work_dir: str, n: int, hold_at: int) -> list[str]:
    """``n`` rounds of a step (``root/effect:r{k}``, or ``root/hold:r{k}`` at round ``hold_at``)
    then a receive on ``go``. Each time the function starts from its first line (its first run,
    or a replay) it appends ``"{eid} {pid}"`` to ``starts.txt``: an activation kept in the
    workflow cache continues without starting again."""
    append_line(Path(work_dir) / STARTS, f"{ctx.eid} {os.getpid()}")
    values = []
    for k in range(n):
        if k == hold_at:
            values.append(await ctx.step(hold, ctx.eid, f"r{k}", work_dir, 30.0, key=f"r{k}"))
        else:
            values.append(await ctx.step(effect, ctx.eid, f"r{k}", work_dir, 0.0, key=f"r{k}"))
        await ctx.receive("go")
    return values
