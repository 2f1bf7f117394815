"""W5 of BENCH.md: W1 with 2 000 workflows and worker processes on PostgreSQL.

The client process opens an engine on the schema (which creates it), spawns ``procs`` worker
processes (``python -m bench.w5_worker``: ``engine.run_worker()``, concurrency 64 each, the
engine's options as shipped) and waits until each has opened its engine. Then, timed: it starts
the ``n`` workflows back to back (as W1) and waits for all of them, running no worker itself. It
waits by reading the executions not yet ended (``read_executions`` of the first of them in start
order, as many as the workers run at once, at least ``CHUNK``; see :func:`wait_all`) rather than
``engine.result`` per execution, whose fallback poll (every 0.5 s per execution, 2 000 of them)
would load the server it measures; the end is seen within ``POLL``.

The kill variant (``kill=True``) sends SIGKILL to worker 0 as soon as half the executions have
completed. The others recover its executions once their leases expire (``lease_ttl``, 30 s as
shipped; ``ttl`` overrides ``lease_ttl`` and ``task_ttl`` in the workers). Every run then reads
every journal: each of the ``steps`` step frames of each execution has exactly one
``frame.completed`` (memoized once), whatever ran twice; the line reports the steps that started
again (``rerun_steps``: a ``frame.started`` more than once) and how the completed steps spread
over the processes.

While timed, the CPU seconds of every process of the machine are counted by part (``cpu_s``:
``client``, ``workers``, ``postgresql``, ``other``; psutil, processes alive from start to end),
with ``machine_busy``, the share of all cores they kept busy: on a machine whose cores also run
the server and the client, it says how much room one more worker process has.
"""

from __future__ import annotations

import asyncio
import collections
import os
import signal
import sys
import tempfile
import time
from pathlib import Path
from typing import IO, Any, Callable

import flowli
from flowli.domain import EntryKind, Status

from .targets import backend_of
from .workloads import RESULT_TIMEOUT, BenchError, registry, sequential

REPO = Path(__file__).resolve().parent.parent
POLL = 0.05
CHUNK = 100
READY_TIMEOUT = 60.0
STOP_TIMEOUT = 20.0


def _log_file(path: Path) -> IO[bytes]:
    return open(path, "wb")  # noqa: SIM115 - handed to the child, closed by the caller


class WorkerProcesses:
    """The worker processes of one run, each logging to ``w{i}.log`` in ``folder``."""

    def __init__(self, url: str, folder: Path, *, concurrency: int, ttl: float | None):
        self.url = url
        self.folder = folder
        self.concurrency = concurrency
        self.ttl = ttl
        self.procs: list[asyncio.subprocess.Process] = []
        self.killed: set[int] = set()

    async def spawn(self, count: int) -> None:
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH")) if p)
        extra = [] if self.ttl is None else ["--ttl", str(self.ttl)]
        for i in range(count):
            log = _log_file(self.folder / f"w{i}.log")
            try:
                proc = await asyncio.create_subprocess_exec(
                    sys.executable, "-m", "bench.w5_worker", self.url, "--ready", str(self.folder / f"w{i}.ready"),
                    "--concurrency", str(self.concurrency), *extra,
                    stdout=log, stderr=asyncio.subprocess.STDOUT, cwd=REPO, env=env,
                )
            finally:
                log.close()
            self.procs.append(proc)
        deadline = time.monotonic() + READY_TIMEOUT
        for i, proc in enumerate(self.procs):
            while not (self.folder / f"w{i}.ready").exists():
                if proc.returncode is not None:
                    raise BenchError(f"worker {i} exited with {proc.returncode}:\n{self.log(i)[-2000:]}")
                if time.monotonic() > deadline:
                    raise BenchError(f"worker {i} did not open its engine in {READY_TIMEOUT} s")
                await asyncio.sleep(0.02)

    def log(self, i: int) -> str:
        path = self.folder / f"w{i}.log"
        return path.read_text(errors="replace") if path.exists() else ""

    async def kill(self, i: int) -> None:
        self.procs[i].send_signal(signal.SIGKILL)
        await self.procs[i].wait()
        self.killed.add(i)

    async def stop(self) -> list[int | None]:
        """SIGTERM to each live worker (a clean stop), SIGKILL after STOP_TIMEOUT; the exit codes."""
        for proc in self.procs:
            if proc.returncode is None:
                proc.send_signal(signal.SIGTERM)
        for proc in self.procs:
            try:
                await asyncio.wait_for(proc.wait(), STOP_TIMEOUT)
            except TimeoutError:
                proc.send_signal(signal.SIGKILL)
                await proc.wait()
        return [proc.returncode for proc in self.procs]

    def log_counts(self) -> dict[str, Any]:
        """Tracebacks and lost leases in the workers' logs, and the first traceback (the logs go
        with the temp dir)."""
        text = [self.log(i) for i in range(len(self.procs))]
        counts: dict[str, Any] = {"tracebacks": sum(t.count("Traceback") for t in text),
                                  "lease_lost": sum(t.count("lease lost") for t in text)}
        for i, t in enumerate(text):
            at = t.find("Traceback")
            if at >= 0:
                start = t.rfind("\n", 0, max(0, at - 1)) + 1  # the log line that announced it
                counts["first_traceback"] = f"worker {i}: " + t[start:start + 3000]
                break
        return counts


def cpu_times(workers: WorkerProcesses) -> dict[int, tuple[str, float]]:
    """CPU seconds (user + system) so far of every process of the machine that psutil may read,
    each with its part: ``client`` (this process), ``workers`` (the W5 worker processes),
    ``postgresql`` (the server's processes: backends, WAL writer, ...) or ``other``."""
    worker_pids = {proc.pid for proc in workers.procs}
    return process_cpu(lambda pid: "workers" if pid in worker_pids else None)


def process_cpu(part_of: Callable[[int], str | None]) -> dict[int, tuple[str, float]]:
    """CPU seconds so far of every process psutil may read, each with its part: this process is
    ``client``, ``part_of(pid)`` names the bench's own, the server's are ``postgresql``, the rest
    ``other``."""
    import psutil

    mine = os.getpid()
    out: dict[int, tuple[str, float]] = {}
    for proc in psutil.process_iter(["name"]):
        try:
            t = proc.cpu_times()
        except psutil.Error:
            continue
        part = "client" if proc.pid == mine else part_of(proc.pid) or (
            "postgresql" if proc.info["name"] in ("postgres", "postmaster") else "other")
        out[proc.pid] = (part, t.user + t.system)
    return out


def cpu_parts(before: dict[int, tuple[str, float]], after: dict[int, tuple[str, float]], wall: float) -> dict[str, Any]:
    """The CPU seconds each part used between two :func:`cpu_times` (processes alive at both), and
    how busy that kept the machine's cores over ``wall`` (1.0: every core all the time). ``wall``
    runs from before the first snapshot to after the second: the processes are read one by one,
    and a process read late in the second snapshot counts CPU used while it was taken."""
    parts: collections.Counter[str] = collections.Counter()
    for pid, (part, t) in after.items():
        if pid in before:
            parts[part] += t - before[pid][1]
    total = sum(parts.values())
    return {"cpu_s": {k: round(v, 3) for k, v in sorted(parts.items())},
            "machine_busy": round(total / ((os.cpu_count() or 1) * wall), 3)}


async def wait_all(
    engine: flowli.Engine, eids: list[str], n: int, *, on_progress: Any = None, timeout: float = RESULT_TIMEOUT,
    window: int = CHUNK,
) -> dict[str, Any]:
    """Wait until ``n`` executions have ended; ``eids`` grows while the client starts them (this
    runs beside the starts, so that the kill variant sees the halfway mark even when it comes
    before the last start). Executions end about in the order they were started, so each read
    asks for the first ``window`` of ``eids`` not yet ended, and the next read follows at once
    when they all had, else after POLL seconds: the client reads each record about once, not
    every open one at every poll (which would load the server it measures). A window at least
    as wide as the executions running at once (processes x concurrency) sees every end soon,
    stuck ones (a killed worker's) included.
    ``on_progress(completed)`` is awaited after each read. Returns the records by eid."""
    ended: dict[str, Any] = {}
    seen = 0  # eids[:seen] are in ``open_`` or ended
    open_: list[str] = []
    deadline = time.monotonic() + timeout
    while len(ended) < n:
        open_ += eids[seen:]
        seen = len(eids)
        ask = open_[:window]
        if ask:
            for record in await engine.statuses(ask):
                if record.terminal:
                    ended[record.eid] = record
            open_ = [eid for eid in open_ if eid not in ended]
            if on_progress is not None:
                await on_progress(sum(1 for r in ended.values() if r.status is Status.COMPLETED))
            if all(eid in ended for eid in ask) and len(ask) == window:
                continue
        if len(ended) < n:
            if time.monotonic() > deadline:
                raise BenchError(f"{n - len(ended)} of {n} executions not ended after {timeout} s")
            await asyncio.sleep(POLL)
    return ended


async def check_journals(engine: flowli.Engine, eids: list[str], steps: int) -> dict[str, Any]:
    """Each execution has exactly ``steps`` step frames completed, each once. Returns the
    figures: steps that started more than once, and completed steps per process."""
    gate = asyncio.Semaphore(16)
    completed: collections.Counter[tuple[str, str]] = collections.Counter()
    started: collections.Counter[tuple[str, str]] = collections.Counter()
    by_pid: collections.Counter[int] = collections.Counter()

    async def one(eid: str) -> None:
        async with gate:
            entries = await engine.journal(eid)
        for e in entries:
            if e.fid is None or e.fid == "root":
                continue
            if e.kind is EntryKind.FRAME_COMPLETED:
                completed[(eid, e.fid)] += 1
                by_pid[e.provenance.site.pid] += 1
            elif e.kind is EntryKind.FRAME_STARTED:
                started[(eid, e.fid)] += 1

    await asyncio.gather(*(one(eid) for eid in eids))
    twice = {k: v for k, v in completed.items() if v != 1}
    per_eid = collections.Counter(eid for eid, _ in completed)
    short = [eid for eid in eids if per_eid[eid] != steps]
    if twice or short:
        raise BenchError(f"memo broken: frames completed more than once {list(twice.items())[:5]}; "
                         f"executions without {steps} completed steps {short[:5]}")
    return {"rerun_steps": sum(1 for v in started.values() if v > 1),
            "steps_by_process": sorted(by_pid.values(), reverse=True)}


async def run_w5(
    url: str, n: int = 2000, *, procs: int = 4, kill: bool = False, steps: int = 10, concurrency: int = 64,
    ttl: float | None = None, log_dir: str | None = None,
) -> dict[str, Any]:
    """W5 (see the module): ``n`` workflows of ``steps`` steps on ``procs`` worker processes."""
    if backend_of(url) != "postgresql":
        raise BenchError("W5 runs on PostgreSQL only (worker processes share the database)")
    if kill and procs < 2:
        raise BenchError("the kill variant needs at least 2 worker processes")
    with tempfile.TemporaryDirectory(prefix="flowli-bench-W5-", dir=log_dir) as folder:
        engine = await flowli.connect(url, registry)  # creates the schema before the workers start
        workers = WorkerProcesses(url, Path(folder), concurrency=concurrency, ttl=ttl)
        kill_info: dict[str, Any] = {}
        try:
            await workers.spawn(procs)

            async def progress(done: int) -> None:
                if kill and not kill_info and done >= n // 2:
                    kill_info.update(killed_after=done, kill_at=time.perf_counter())
                    await workers.kill(0)

            eids: list[str] = []
            read_from = time.perf_counter()  # the CPU read spans both snapshots: see cpu_parts
            cpu_before = cpu_times(workers)
            t0 = time.perf_counter()
            waiting = asyncio.ensure_future(wait_all(engine, eids, n, on_progress=progress,
                                                  window=max(CHUNK, procs * concurrency)))
            try:
                for _ in range(n):
                    eids.append(await engine.start(sequential, steps))
                started = time.perf_counter()
                records = await waiting
            finally:
                if not waiting.done():  # a start failed: stop waiting, keep its error
                    waiting.cancel()
                    await asyncio.wait([waiting])
            wall = time.perf_counter() - t0
            cpu_after = cpu_times(workers)
            cpu = cpu_parts(cpu_before, cpu_after, time.perf_counter() - read_from)
            bad = [(eid, r.status.value, r.result) for eid, r in records.items()
                   if r.status is not Status.COMPLETED or r.result != sum(range(steps))]
            if bad:
                raise BenchError(f"{len(bad)} executions did not complete as expected: {bad[:3]}")
            figures = await check_journals(engine, eids, steps)
        except Exception as exc:
            await workers.stop()
            exc.add_note(f"worker logs: {workers.log_counts()}")  # they go with the temp dir
            raise
        finally:
            exits = await workers.stop()
            await engine.close()
        logs = workers.log_counts()
    total = n * steps
    line: dict[str, Any] = {
        "engine": "flowli", "backend": "postgresql", "workload": "W5", "n": n, "wall_s": round(wall, 4),
        "rate": round(total / wall, 1), "unit": "steps/s", "steps": total, "procs": procs,
        "variant": "sigkill" if kill else "plain", "start_s": round(started - t0, 4), "concurrency": concurrency,
        "ttl_s": ttl, **figures, **cpu, "worker_exits": exits, "worker_log": logs,
    }
    if kill:
        line["killed_after"] = kill_info["killed_after"]
        line["kill_at_s"] = round(kill_info["kill_at"] - t0, 4)
        line["recovery_s"] = round(wall - (kill_info["kill_at"] - t0), 4)
    return line
