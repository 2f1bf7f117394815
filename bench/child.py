"""One run in a process of its own: ``python -m bench.child ENGINE WORKLOAD URL --n N``.

Every DBOS run goes through here (DBOS keeps one global instance per process: a fresh process
is a fresh instance), and so does W6 on both engines (its peak RSS must be the run's alone).
The child runs the workload on the database of ``URL`` (fresh, made by the parent: see
:mod:`bench.targets`) and prints its JSON line as the last line of stdout; its stderr goes to a
file that the parent quotes when the run fails.

:func:`run_child` is the parent's side: it spawns the child, samples its RSS with psutil every
``SAMPLE`` seconds while it runs (``rss_sampled_peak_mb`` in the line: the same process seen from
outside, beside the child's own ``VmHWM``), and returns the line.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ENGINES = ("flowli", "dbos")
REPO = Path(__file__).resolve().parent.parent
SAMPLE = 0.02
CHILD_TIMEOUT = 1800.0


class ChildError(RuntimeError):
    """The child process failed or printed no JSON line."""


# ---- the child ------------------------------------------------------------------------------


async def _flowli(workload: str, url: str, n: int, options: dict[str, Any]) -> dict[str, Any]:
    if workload == "W6":
        from .w6 import run_w6

        options.pop("sleep_s", None)
        return await run_w6(url, n, **options)
    from .workloads import WORKLOADS

    if workload != "W4":
        options.pop("sleep_s", None)
    return await WORKLOADS[workload].run(url, n, **options)


async def _dbos(workload: str, url: str, n: int, options: dict[str, Any]) -> dict[str, Any]:
    from . import peer_dbos

    options.pop("concurrency", None)  # DBOS runs every started workflow at once on the loop
    with peer_dbos.launched(url):
        return await peer_dbos.run(workload, url, n, **options)


def child_main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.child")
    p.add_argument("engine", choices=ENGINES)
    p.add_argument("workload")
    p.add_argument("url")
    p.add_argument("--n", type=int, required=True)
    p.add_argument("--sleep", type=float, default=None, help="W4's sleep in seconds")
    p.add_argument("--concurrency", type=int, default=None, help="flowli's worker concurrency")
    args = p.parse_args(argv)
    options: dict[str, Any] = {}
    if args.sleep is not None:
        options["sleep_s"] = args.sleep
    if args.concurrency is not None:
        options["concurrency"] = args.concurrency
    run = _dbos if args.engine == "dbos" else _flowli
    line = asyncio.run(run(args.workload.upper(), args.url, args.n, options))
    print(json.dumps(line), flush=True)
    return 0


# ---- the parent -----------------------------------------------------------------------------


async def run_child(engine: str, workload: str, url: str, n: int, *, sleep_s: float | None = None,
                    concurrency: int | None = None, timeout: float = CHILD_TIMEOUT) -> dict[str, Any]:
    """Run one workload in a child process; returns its line with the RSS sampled from outside."""
    import psutil

    cmd = [sys.executable, "-m", "bench.child", engine, workload, url, "--n", str(n)]
    if sleep_s is not None:
        cmd += ["--sleep", str(sleep_s)]
    if concurrency is not None:
        cmd += ["--concurrency", str(concurrency)]
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH")) if p)
    with tempfile.TemporaryFile() as err:
        proc = await asyncio.create_subprocess_exec(*cmd, stdout=asyncio.subprocess.PIPE, stderr=err, cwd=REPO, env=env)
        peak = 0
        watched = psutil.Process(proc.pid)

        async def sample() -> None:
            nonlocal peak
            while True:
                try:
                    peak = max(peak, watched.memory_info().rss)
                except psutil.Error:
                    return
                await asyncio.sleep(SAMPLE)

        sampler = asyncio.ensure_future(sample())
        t0 = time.monotonic()
        try:
            out, _ = await asyncio.wait_for(proc.communicate(), timeout)
        except TimeoutError:
            proc.kill()
            await proc.wait()
            raise ChildError(f"{engine} {workload} did not finish in {timeout} s") from None
        finally:
            sampler.cancel()
            await asyncio.gather(sampler, return_exceptions=True)
        err.seek(0)
        stderr = err.read().decode(errors="replace")
    lines = [x for x in out.decode(errors="replace").splitlines() if x.startswith("{")]
    if proc.returncode != 0 or not lines:
        raise ChildError(f"{engine} {workload} exited {proc.returncode} after {time.monotonic() - t0:.1f} s:\n"
                         f"{stderr[-3000:]}")
    line: dict[str, Any] = json.loads(lines[-1])
    line["rss_sampled_peak_mb"] = round(peak / 2**20, 1)
    return line


if __name__ == "__main__":
    sys.exit(child_main())
