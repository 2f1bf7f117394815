"""``flowli serve`` with the SQLite statements it runs counted, per thread: what ``python -m
bench.pipelines --count`` reads. Counts do not move with the machine's noise, where CPU figures
move by 10-30 % between runs on a shared machine.

``python -m bench.counted_serve ARGS`` (from the checkout's root) runs ``python -m flowli.cli ARGS``
with a trace callback on every SQLite connection the process opens. Each statement is counted under the name of the thread
that ran it (``MainThread``: the event loop's point reads; ``flowli-sqlite-writer``: the writes;
``flowli-sqlite-reader``: the scans) and its kind: ``begin`` (a transaction) or ``statement``.
A statement that fires a trigger is counted again for the trigger and for each statement of its
body (the callback gets the firing statement's text for each). On SIGUSR1 the process writes its counts so
far, with a sequence number, to the JSON file that ``FLOWLI_BENCH_COUNTS`` names (``read_counts``
asks for them and waits). The callback costs CPU: a counted run's CPU figures are not comparable
with an uncounted one's."""

from __future__ import annotations

import collections
import json
import os
import runpy
import signal
import sqlite3
import sys
import threading
import time
from pathlib import Path
from typing import Any

COUNTS_ENV = "FLOWLI_BENCH_COUNTS"
_counts: collections.Counter[str] = collections.Counter()
_lock = threading.Lock()
_written = 0


def _kind(sql: str) -> str:
    return "begin" if sql[:5].upper() == "BEGIN" else "statement"


def _trace(sql: str) -> None:
    key = f"{threading.current_thread().name}:{_kind(sql)}"
    with _lock:
        _counts[key] += 1


def _write(*_: Any) -> None:
    global _written
    _written += 1
    path = Path(os.environ[COUNTS_ENV])
    with _lock:
        data = {"seq": _written, "counts": dict(_counts)}
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(data))
    tmp.replace(path)


def read_counts(pid: int, path: Path, timeout: float = 10.0) -> dict[str, int]:
    """The counts of the counted process ``pid`` now: asks it (SIGUSR1) and waits for its answer."""
    before = json.loads(path.read_text())["seq"] if path.exists() else 0
    os.kill(pid, signal.SIGUSR1)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if path.exists():
            data = json.loads(path.read_text())
            if data["seq"] > before:
                return dict(data["counts"])
        time.sleep(0.01)
    raise RuntimeError(f"the counted service (pid {pid}) wrote no counts to {path} within {timeout} s")


def main() -> None:
    if COUNTS_ENV not in os.environ:
        raise SystemExit(f"{COUNTS_ENV} names no file: where the counts go")
    connect = sqlite3.connect

    def traced(*args: Any, **kwargs: Any) -> sqlite3.Connection:
        conn = connect(*args, **kwargs)
        conn.set_trace_callback(_trace)
        return conn

    sqlite3.connect = traced  # type: ignore[assignment]
    signal.signal(signal.SIGUSR1, _write)
    sys.argv = ["flowli", *sys.argv[1:]]
    runpy.run_module("flowli.cli", run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()
