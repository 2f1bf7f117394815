"""The medians and the flowli/DBOS ratios of a bench run as Markdown: ``python -m bench.report results.jsonl``.

Reads the JSON lines that ``python -m bench.run`` printed and writes the tables of
``bench/RESULTS.md`` (the same medians and ratios as the run's stderr, through the same
:func:`bench.run.summarize` and :func:`bench.run.engine_ratios`).
"""

from __future__ import annotations

import json
import sys
from typing import Any

from .run import engine_ratios, summarize
from .targets import BACKENDS


def _fmt(x: Any, digits: int) -> str:
    return "-" if x is None else f"{x:.{digits}f}"


def medians_table(rows: list[dict[str, Any]]) -> str:
    out = ["| workload | engine | backend | variant | n | runs | wall s | rate | unit | p50 ms | p99 ms | peak RSS MB |",
           "|---|---|---|---|---:|---:|---:|---:|---|---:|---:|---:|"]
    order = {b: i for i, b in enumerate(BACKENDS)}
    for r in sorted(rows, key=lambda r: (r["workload"], order.get(r["backend"], 9), r.get("variant") or "",
                                         r["engine"] != "flowli")):
        variant = r.get("variant") or ""
        if r.get("recovery_s") is not None:
            variant += f" (recovery {r['recovery_s']:.1f} s)"
        backend = r["backend"] + (f"/{r['driver']}" if r.get("driver") else "")
        out.append(f"| {r['workload']} | {r['engine']} | {backend} | {variant} | {r['n']} | {r['runs']} | "
                   f"{_fmt(r['wall_s'], 3)} | {_fmt(r['rate'], 1)} | {r['unit'] if r['rate'] is not None else '-'} | "
                   f"{_fmt(r['p50_ms'], 2)} | {_fmt(r['p99_ms'], 2)} | {_fmt(r.get('peak_rss_mb'), 1)} |")
    return "\n".join(out)


def ratios_table(rows: list[dict[str, Any]]) -> str:
    out = ["| workload | backend | figure | flowli | DBOS | ratio (> 1: flowli better) |",
           "|---|---|---|---:|---:|---:|"]
    for x in engine_ratios(rows):
        out.append(f"| {x['workload']} | {x['backend']} | {x['figure']} | {_fmt(x['flowli'], 2)} | "
                   f"{_fmt(x['dbos'], 2)} | {'x' + _fmt(x['ratio'], 2) if x['ratio'] is not None else '-'} |")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m bench.report results.jsonl", file=sys.stderr)
        return 2
    with open(args[0]) as f:
        lines = [json.loads(x) for x in f if x.strip().startswith("{")]
    rows = summarize(lines)
    print(medians_table(rows))
    print()
    print(ratios_table(rows))
    failed = [x for x in lines if "error" in x]
    if failed:
        print(f"\n{len(failed)} failed runs (left out of the medians):")
        for x in failed:
            print(f"- {x['engine']} {x['workload']} {x['backend']} run {x.get('run')}: {x['error'][:200]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
