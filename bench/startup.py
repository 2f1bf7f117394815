"""What a process costs to start: the CPU (user + system) of a fresh interpreter for

- ``import``: ``python -c "import flowli"`` (a worker or a script, before its own code);
- ``help``: ``flowli --help`` (the command line parsed whole);
- ``cli``: ``flowli --db sqlite:///... apps ls`` (a CLI call that opens a database and reads);
- ``serve``: ``flowli serve`` on a fresh SQLite file, until ``GET /healthz`` answers.

Every CLI call and every server start pays this, and so does the test suite, which starts
about 1,400 processes. ``python -m bench.startup [--runs N] [--tree PATH ...]``: each case N times
(default 7) for each tree (default: the installed flowli), the trees alternated run by run; a
tree is a checkout whose ``src`` is put first on ``PYTHONPATH`` (to compare a commit with
another). Prints a JSON line per case and tree, then a table of medians in milliseconds.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

CASES = ("import", "help", "cli", "serve")


def _env(tree: str | None) -> dict[str, str]:
    env = dict(os.environ)
    if tree is not None:
        env["PYTHONPATH"] = str(Path(tree) / "src") + os.pathsep + env.get("PYTHONPATH", "")
    return env


def _children_cpu() -> float:
    used = resource.getrusage(resource.RUSAGE_CHILDREN)
    return used.ru_utime + used.ru_stime


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _serve_cpu(env: dict[str, str], db: str) -> float:
    """The CPU of ``flowli serve`` from its start until /healthz answers (read from /proc)."""
    port = _free_port()
    proc = subprocess.Popen([sys.executable, "-m", "flowli.cli", "--db", db, "serve", "--port", str(port)],
                            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=1):
                    break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise SystemExit(f"flowli serve did not answer /healthz (exit {proc.returncode})") from None
                time.sleep(0.02)
        fields = Path(f"/proc/{proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def measure(case: str, tree: str | None, folder: Path) -> float:
    """The CPU seconds of one start of ``case``."""
    env = _env(tree)
    db = f"sqlite:///{folder / f'{case}-{time.monotonic_ns()}.db'}"
    if case == "serve":
        return _serve_cpu(env, db)
    argv = {"import": ["-c", "import flowli"], "help": ["-m", "flowli.cli", "--help"],
            "cli": ["-m", "flowli.cli", "--db", db, "apps", "ls"]}[case]
    before = _children_cpu()
    subprocess.run([sys.executable, *argv], env=env, check=True, stdout=subprocess.DEVNULL)
    return _children_cpu() - before


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--tree", action="append", help="a checkout to measure (its src first on PYTHONPATH)")
    parser.add_argument("--cases", default=",".join(CASES))
    args = parser.parse_args()
    trees: list[str | None] = list(args.tree) if args.tree else [None]
    cases = [c for c in args.cases.split(",") if c]
    figures: dict[tuple[str, str], list[float]] = {}
    with tempfile.TemporaryDirectory() as folder:
        for case in cases:
            for tree in trees:
                measure(case, tree, Path(folder))  # a first start writes the bytecode caches: not counted
            for _ in range(args.runs):
                for tree in trees:
                    figures.setdefault((case, tree or "installed"), []).append(measure(case, tree, Path(folder)))
    for (case, tree), values in figures.items():
        print(json.dumps({"workload": f"startup-{case}", "tree": tree, "unit": "ms", "cpu_ms": round(
            statistics.median(values) * 1000, 1), "runs": [round(v * 1000, 1) for v in values]}))
    print(f"\n{'case':<8}" + "".join(f"{t or 'installed':>24}" for t in trees) + "   (CPU ms, medians)")
    for case in cases:
        print(f"{case:<8}" + "".join(f"{statistics.median(figures[(case, t or 'installed')]) * 1000:>24.1f}"
                                     for t in trees))


if __name__ == "__main__":
    main()
