"""C1: a composition of 3 layers x 4 steps against the same work as one plain Python workflow,
in the same invocation and on the same database kind.

Each step of the composition is a child execution of ``bench.work`` (one trivial step); the
plain workflow runs the same 12 trivial steps, 4 at a time with ``ctx.gather``, layer after
layer. ``n`` runs of each are started at once and worked by one in-process worker (concurrency
64): runs/s, first start to last completion, and the overhead per step of the composition
(seconds per run of the composition minus the plain one's, over 12 steps). One run of each goes
first, not timed.

``python -m bench.catalog [--backend sqlite,postgresql] [--runs 3] [--n 200]`` prints one JSON
line per run and the medians.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time
from typing import Any

import flowli
from flowli.catalog import Catalog

from .targets import fresh_url

LAYERS, WIDTH = 3, 4
registry = flowli.Registry()


def work(i: int) -> dict[str, int]:
    return {"i": i}


@registry.workflow("bench.work", kind="state_machine", description="One trivial step.")
async def bench_work(ctx: flowli.Context, i: int) -> dict[str, int]:
    return await ctx.step(work, i)


@registry.workflow("bench.plain_layers")
async def plain_layers(ctx: flowli.Context, seed: int) -> dict[str, int]:
    out: dict[str, int] = {}
    for layer in range(LAYERS):
        values = await ctx.gather(*(ctx.step(work, seed + layer * WIDTH + k, key=f"l{layer}s{k}") for k in range(WIDTH)))
        out.update({f"l{layer}s{k}": v["i"] for k, v in enumerate(values)})
    return out


def composition() -> dict[str, Any]:
    layers = []
    for layer in range(LAYERS):
        steps = []
        for k in range(WIDTH):
            source = {"source": "input", "field": "seed"} if layer == 0 else \
                {"source": "step", "step": f"l{layer - 1}s{k}", "field": "i"}
            steps.append({"name": f"l{layer}s{k}", "workflow_type": "bench.work", "input_mapping": {"i": source}})
        layers.append({"name": f"layer_{layer}", "steps": steps})
    return {"name": "c1", "version": "1", "layers": layers}


async def one_run(backend: str, n: int) -> dict[str, Any]:
    async with fresh_url(backend) as url:
        engine = await flowli.connect(url, registry)
        async with engine, engine.worker(concurrency=64):
            catalog = Catalog(engine)
            saved = await catalog.save_composition(composition())

            async def timed(start: Any) -> float:
                t0 = time.perf_counter()
                eids = await asyncio.gather(*(start(i) for i in range(n)))
                results = await asyncio.gather(*(engine.result(e, timeout=600) for e in eids))
                elapsed = time.perf_counter() - t0
                assert len(results) == n
                return elapsed

            # one run of each first, not timed: what a process builds or imports at its first
            # composition (the inputs' model, pydantic) is not the cost of a step
            await engine.result(await engine.start("bench.plain_layers", -1), timeout=600)
            await engine.result(await _start_virtual(catalog, saved["workflow_type"], -1), timeout=600)
            plain = await timed(lambda i: engine.start("bench.plain_layers", i))
            composed = await timed(lambda i: _start_virtual(catalog, saved["workflow_type"], i))
            last = (await catalog.list(workflow_type=saved["workflow_type"], limit=1))["runs"][0]
            assert last["status"] == "COMPLETED", last
    steps = LAYERS * WIDTH
    return {"workload": "C1", "backend": backend, "n": n, "steps_per_run": steps,
            "composition_runs_per_s": round(n / composed, 1), "plain_runs_per_s": round(n / plain, 1),
            "overhead_ms_per_step": round((composed - plain) / n / steps * 1000, 3),
            "ratio_plain_over_composition": round(composed / plain, 2)}


async def _start_virtual(catalog: Catalog, name: str, i: int) -> str:
    return str((await catalog.start(name, {"seed": i}))["workflow_id"])


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--backend", default="sqlite")
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--n", type=int, default=200)
    args = p.parse_args(argv)
    for backend in [b.strip() for b in args.backend.split(",") if b.strip()]:
        lines = []
        for _ in range(args.runs):
            line = asyncio.run(one_run(backend, args.n))
            print(json.dumps(line), flush=True)
            lines.append(line)
        keys = ("composition_runs_per_s", "plain_runs_per_s", "overhead_ms_per_step", "ratio_plain_over_composition")
        print(json.dumps({"workload": "C1", "backend": backend, "median_of": len(lines),
                          **{k: statistics.median(line[k] for line in lines) for k in keys}}), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
