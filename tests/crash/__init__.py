"""Crash tests: real worker processes share one database (a SQLite file, or a PostgreSQL schema);
the tests kill them with SIGKILL or pause them with SIGSTOP, and read the journal, the effects
file and the workers' logs.

This module is their harness: the worker processes of one test, bounded waits, and readers.
"""

from __future__ import annotations

import asyncio
import inspect
import os
import signal
import sqlite3
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

from flowli.domain import Entry, EntryKind

WORKER = Path(__file__).resolve().parent / "worker_main.py"


class Workers:
    """The worker processes of one test on the database at ``url``, each logging to
    ``{name}.log`` in ``folder``. :meth:`close` kills every one still alive, stopped ones included."""

    def __init__(self, folder: Path, url: str):
        self.folder = folder
        self.url = url
        self.db = Path(url.removeprefix("sqlite:///")) if url.startswith("sqlite:///") else None
        """The SQLite file, or None (PostgreSQL)."""
        self.procs: dict[str, subprocess.Popen[bytes]] = {}

    def spawn(self, name: str, *options: str) -> subprocess.Popen[bytes]:
        ready = self.folder / f"{name}.ready"
        with open(self.folder / f"{name}.log", "wb") as log:
            proc = subprocess.Popen(
                [sys.executable, str(WORKER), self.url, "--ready", str(ready), *options],
                stdout=log, stderr=subprocess.STDOUT, cwd=self.folder,
            )
        self.procs[name] = proc
        return proc

    async def ready(self, name: str, timeout: float = 20) -> None:
        proc = self.procs[name]
        await until(lambda: (self.folder / f"{name}.ready").exists() or proc.poll() is not None,
                    timeout, f"worker {name} to open its engine")
        assert proc.poll() is None, f"worker {name} exited with {proc.returncode}:\n{self.log(name)}"

    def log(self, name: str) -> str:
        path = self.folder / f"{name}.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def kill(self, name: str) -> None:
        proc = self.procs[name]
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)

    async def pause(self, name: str) -> None:
        """SIGSTOP worker ``name``. On SQLite, at a moment when it holds no write lock on the file
        (:func:`pause_outside_write`); on PostgreSQL, a plain SIGSTOP: a lock that a stopped
        process holds there is a row lock, which blocks only the rows it locked, and a worker
        whose step waits runs no write transaction (its renewals are single statements)."""
        pid = self.procs[name].pid
        if self.db is not None:
            await pause_outside_write(pid, self.db)
        else:
            os.kill(pid, signal.SIGSTOP)
            await until(lambda: _stopped(pid), 5, f"process {pid} to stop")

    def close(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                os.kill(proc.pid, signal.SIGKILL)  # a stopped process dies of SIGKILL too
                proc.wait(timeout=10)


async def until(check: Callable[[], Any], timeout: float, what: str) -> Any:
    """Poll ``check`` (sync or async) until it returns something true; fail after ``timeout`` s."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if inspect.isawaitable(value):
            value = await value
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        await asyncio.sleep(0.02)


def _stopped(pid: int) -> bool:
    with open(f"/proc/{pid}/stat") as f:
        return f.read().rsplit(")", 1)[1].split()[0] in ("T", "t")


async def pause_outside_write(pid: int, db: Path) -> None:
    """SIGSTOP ``pid`` at a moment when it holds no write lock on ``db``.

    A process stopped inside a write transaction would hold the SQLite lock and block every other
    process for the busy timeout; that is SQLite, not the lease logic under test. So: stop, check
    that a write transaction can begin, else let the process run a moment and try again.
    """
    for _ in range(100):
        os.kill(pid, signal.SIGSTOP)
        await until(lambda: _stopped(pid), 5, f"process {pid} to stop")
        conn = sqlite3.connect(db, timeout=0.3, isolation_level=None)
        try:
            conn.execute("BEGIN IMMEDIATE")
            conn.execute("ROLLBACK")
            return
        except sqlite3.OperationalError:
            pass
        finally:
            conn.close()
        os.kill(pid, signal.SIGCONT)
        await asyncio.sleep(0.01)
    raise AssertionError(f"process {pid} held the write lock of {db} at every try")


def lines(path: Path) -> list[list[str]]:
    """The lines of an effects or marker file, split into fields."""
    return [line.split() for line in path.read_text().splitlines()] if path.exists() else []


def pid_of(entry: Entry) -> int:
    return entry.provenance.site.pid


def epoch_of(entry: Entry) -> int | None:
    return entry.provenance.site.epoch


def summary(journal: list[Entry]) -> str:
    """The journal, one entry a line, for the message of a failed assertion."""
    return "\n".join(f"{e.seq:>3} {e.kind.value:<20} {e.fid or '':<18} pid={pid_of(e)} epoch={epoch_of(e)}"
                     for e in journal)


def completed_counts(journal: list[Entry]) -> Counter[str]:
    """How many ``frame.completed`` entries each frame id has."""
    return Counter(e.fid for e in journal if e.kind is EntryKind.FRAME_COMPLETED and e.fid is not None)


def step_name(fid: str) -> str:
    """``root/effect:s1`` -> ``s1`` (the app's frames are keyed by step name)."""
    return fid.rsplit(":", 1)[1]
