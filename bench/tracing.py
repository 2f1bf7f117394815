"""W1 with tracing against W1 without, in the same invocation, run after run alternately.

"traced" gives the engine an OpenTelemetry SDK ``TracerProvider`` with a ``BatchSpanProcessor``
(as a production setup has) in front of an in-memory exporter (no network in the figure);
"untraced" gives none, so tracing is off. Each run is W1 of :mod:`bench.workloads` (``n``
workflows of 10 sequential steps on a fresh database, one in-process worker of concurrency 64).
The traced run's span count is checked: one workflow, one activation and ten step spans per
workflow at least.

``python -m bench.tracing [--backend sqlite,postgresql] [--runs 5] [--n 200]`` prints one JSON
line per run and, per backend, the medians and the ratio traced / untraced.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
from typing import Any

from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import flowli

from .targets import fresh_url
from .workloads import registry, run_w1

STEPS = 10


async def one_run(backend: str, n: int, traced: bool) -> dict[str, Any]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(BatchSpanProcessor(exporter))

    async def opener(url: str) -> flowli.Engine:
        return await flowli.connect(url, registry, tracer_provider=provider if traced else None)

    async with fresh_url(backend, prefix="flowli-bench-tracing-") as url:
        line = await run_w1(url, n, opener=opener, steps=STEPS)
    provider.force_flush()
    spans = len(exporter.get_finished_spans())
    provider.shutdown()
    if traced and spans < n * (STEPS + 2):
        raise RuntimeError(f"a traced W1 of {n} workflows gave {spans} spans, fewer than {n * (STEPS + 2)}")
    if not traced and spans:
        raise RuntimeError(f"an untraced W1 gave {spans} spans")
    return {**line, "traced": traced, "spans": spans}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--backend", default="sqlite")
    p.add_argument("--runs", type=int, default=5)
    p.add_argument("--n", type=int, default=200)
    args = p.parse_args(argv)
    for backend in [b.strip() for b in args.backend.split(",") if b.strip()]:
        rates: dict[bool, list[float]] = {True: [], False: []}
        for _ in range(args.runs):
            for traced in (False, True):
                line = asyncio.run(one_run(backend, args.n, traced))
                print(json.dumps(line), flush=True)
                rates[traced].append(line["rate"])
        untraced, traced_ = statistics.median(rates[False]), statistics.median(rates[True])
        print(json.dumps({"workload": "W1 traced / untraced", "backend": backend, "median_of": args.runs,
                          "untraced_steps_per_s": untraced, "traced_steps_per_s": traced_,
                          "ratio_traced_over_untraced": round(traced_ / untraced, 3)}), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
