"""A simulation of pipelines over HTTP on more cores than this machine has: how many one-stage
pipelines a second ``flowli serve --workers S`` on PostgreSQL sustains on ``C`` cores, from the
CPU each part spends per stage (measured here by ``bench.http --backend postgresql``) and the
commits it makes.

``python -m bench.scaling [--cores 16] [--costs measured|planned] [--json FILE]``

The model, one stage after another through a closed system of parts:

- ``S`` service processes, each one event loop (one core at most: the interpreter's lock): a
  stage costs ``service`` ms of CPU in one of them;
- PostgreSQL, whose backends use any core: ``postgresql`` ms of CPU a stage, and its commits:
  a group commit flushes the WAL once for the writes queued behind it, but a transaction that
  sent a notification holds the database's notify lock from its commit until its WAL is flushed,
  so those commits follow one another: ``serial`` ms each, ``commits`` of them a stage;
- ``W`` HttpWorker processes (one core each at most), ``worker`` ms a stage;
- the clients that create the pipelines, ``client`` ms a stage.

Each core runs one thing at a time; the runnable work of every part shares the cores (processor
sharing, as the kernel does it near enough). The simulation advances in small steps of time: in
each, every part gets its share of the cores (a single-loop process at most one core), work is
done at that rate, and a stage moves on when its part's work for it is done. The throughput is
stages per second once the pipeline of parts is full; the report says which part bounds it.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import dataclass, field
from typing import Any

MEASURED = {"service": 4.38, "postgresql": 2.39, "worker": 0.24, "client": 0.07, "commits": 1.0, "serial": 0.1}
"""Per stage, ms of CPU of each part, as ``bench.http --workloads H1B --backend postgresql`` measured
on this 2-core machine (2026-12-04, medians of two runs); ``commits``, the commits a stage makes
that send a notification (at most one per write that makes a job ready or wakes a poll: 1.0 is
the bound, not a measure), and ``serial``, the ms each of those holds the notify lock (the WAL
flush of a local disk: an estimate). ``--measured FILE`` takes a line of ``bench.http`` instead."""

PLANNED = {"service": 0.55, "postgresql": 0.35, "worker": 0.1, "client": 0.05, "commits": 0.05, "serial": 0.1}
"""Per stage, what the plan in ``bench/RESULTS.md`` ("10,000 stages/s on 16 cores") aims at."""


@dataclass
class Part:
    name: str
    cost: float
    """ms of CPU per stage."""
    processes: int
    """How many cores it may use at once (0: as many as there are)."""
    queue: float = 0.0
    """Stages waiting in it (fractional: a fluid of stages)."""
    done: float = 0.0


@dataclass
class Outcome:
    cores: int
    service_processes: int
    worker_processes: int
    stages_per_s: float
    busy: dict[str, float] = field(default_factory=dict)
    """Cores each part used on average."""
    bound: str = ""


def simulate(costs: dict[str, float], cores: int, service: int, workers: int, seconds: float = 1.0,
             step_ms: float = 0.1, in_flight: int = 512) -> Outcome:
    """Run the closed system for ``seconds`` of simulated time with ``in_flight`` stages in it."""
    parts = [Part("client", costs["client"], 0), Part("service", costs["service"], service),
             Part("postgresql", costs["postgresql"], 0), Part("worker", costs["worker"], workers)]
    serial_per_stage = costs["commits"] * costs["serial"]
    parts[0].queue = float(in_flight)
    serial_free = 0.0  # ms of the notify-serialized commit section still owed
    used = {p.name: 0.0 for p in parts}
    completed = 0.0
    t = 0.0
    warm = seconds / 4
    end = seconds * 1000
    while t < end:
        # each part asks for cores: its queue's work, capped by its processes
        wants = {p.name: min(p.queue, p.processes or cores) if p.queue > 1e-9 else 0.0 for p in parts}
        total = sum(wants.values())
        scale = min(1.0, cores / total) if total else 0.0
        for i, p in enumerate(parts):
            share = wants[p.name] * scale  # cores this part runs on during this step
            if share <= 0:
                continue
            stages = min(p.queue, share * step_ms / p.cost)
            if p.name == "postgresql" and serial_per_stage > 0:
                # the commits that notify follow one another: at most step_ms of them per step
                stages = min(stages, max(0.0, (step_ms - serial_free) / serial_per_stage))
                serial_free = max(0.0, serial_free + stages * serial_per_stage - step_ms)
            p.queue -= stages
            nxt = parts[(i + 1) % len(parts)]
            nxt.queue += stages
            if t >= warm * 1000:
                used[p.name] += stages * p.cost
                if p.name == "worker":
                    completed += stages
        t += step_ms
    measured_ms = end - warm * 1000
    busy = {name: round(ms / measured_ms, 2) for name, ms in used.items()}
    rate = completed / (measured_ms / 1000)
    limits = {"cores": cores / sum(p.cost for p in parts) * 1000,
              "service processes": service / costs["service"] * 1000,
              "worker processes": workers / costs["worker"] * 1000,
              "notify-serialized commits": 1000 / serial_per_stage if serial_per_stage else float("inf")}
    bound = min(limits, key=lambda k: limits[k])
    return Outcome(cores, service, workers, round(rate, 1), busy, bound)


def best(costs: dict[str, float], cores: int) -> Outcome:
    """The split of service and worker processes that gives the most stages/s on ``cores``."""
    outcomes = [simulate(costs, cores, s, w) for s in range(1, cores + 1) for w in range(1, max(2, cores // 2) + 1)]
    return max(outcomes, key=lambda o: o.stages_per_s)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--cores", default="2,4,8,16")
    p.add_argument("--costs", default="measured,planned")
    p.add_argument("--measured", default=None, help="a JSON line of bench.http (its cpu_ms_per_stage, commits)")
    p.add_argument("--observed", type=float, default=189.4,
                   help="stages/s that bench.http measured with the measured costs on 2 cores: the model's"
                        " figures are scaled by observed / modelled at 2 cores (its efficiency)")
    args = p.parse_args()
    measured = dict(MEASURED)
    if args.measured:
        with open(args.measured) as f:
            line = json.loads(f.readline())
        for k, v in line["cpu_ms_per_stage"].items():
            if k in measured:
                measured[k] = v
        if "commits_per_stage" in line:
            measured["commits"] = line["commits_per_stage"]
    sets: dict[str, dict[str, float]] = {"measured": measured, "planned": PLANNED}
    # what the model leaves out (the interpreter's lock, context switches, latency between the
    # parts) costs this machine a share of its cores: the same share is taken off every figure
    efficiency = args.observed / best(measured, 2).stages_per_s
    for name in args.costs.split(","):
        costs = sets[name]
        for cores in (int(c) for c in args.cores.split(",")):
            o = best(costs, cores)
            out: dict[str, Any] = {"costs": name, **o.__dict__, "efficiency": round(efficiency, 3),
                                   "calibrated_stages_per_s": round(o.stages_per_s * efficiency, 1), "per_stage": costs}
            print(json.dumps(out))


if __name__ == "__main__":
    main()
