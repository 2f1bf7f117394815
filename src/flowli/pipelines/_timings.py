"""The stage metrics of this service process, by application, pipeline name and handler: how long
a stage's job waited in its queue before a worker took it (schedule to start), how long its
attempt ran until its result (taken to result), and the results by outcome. A Prometheus
collector: ``flowli serve`` registers it beside the engine's metrics (``GET /metrics``).

Each figure is this process's own (a job taken here and answered through another process counts
its wait here and no duration), as Prometheus expects of a histogram: the scrape of every
process is summed."""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from flowli.domain import Task

if TYPE_CHECKING:
    from prometheus_client.core import Metric

BOUNDS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0, 900.0, 3600.0)
"""The upper bounds (seconds) of the histograms' buckets: a job taken in 5 ms to one that waited
an hour."""
TRACKED = 100_000
"""The jobs taken whose start this process remembers at most (the oldest forgotten first)."""
LABELS = ["application", "pipeline", "handler"]

Key = tuple[str, str, str]


@dataclass
class _Histogram:
    counts: list[int] = field(default_factory=lambda: [0] * len(BOUNDS))
    total: float = 0.0
    n: int = 0

    def observe(self, seconds: float) -> None:
        seconds = max(0.0, seconds)
        for i, bound in enumerate(BOUNDS):
            if seconds <= bound:
                self.counts[i] += 1
                break
        self.total += seconds
        self.n += 1

    def buckets(self) -> list[tuple[str, float]]:
        out: list[tuple[str, float]] = []
        seen = 0
        for bound, count in zip(BOUNDS, self.counts, strict=True):
            seen += count
            out.append((str(bound), seen))
        out.append(("+Inf", self.n))
        return out


def key_of(task: Task) -> Key:
    """A job's labels: its application, its pipeline's name (from the job's seed), its handler."""
    seed = task.payload or {}
    return (str(task.application or ""), str(seed.get("pipelineName") or ""), str(seed.get("stageHandlerName") or ""))


class StageTimings:
    """A Prometheus collector (a registry takes any object with ``collect``): prometheus_client is
    imported when metrics are collected, so a process that serves none (a CLI call) never loads it."""

    def __init__(self) -> None:
        self._waited: dict[Key, _Histogram] = {}
        self._ran: dict[Key, _Histogram] = {}
        self._results: dict[tuple[Key, str], int] = {}
        self._taken: dict[str, tuple[float, Key]] = {}

    def taken(self, task: Task, waited: float) -> None:
        """A worker took ``task`` (a pull), ``waited`` seconds after it was queued."""
        key = key_of(task)
        self._waited.setdefault(key, _Histogram()).observe(waited)
        if len(self._taken) >= TRACKED:
            self._taken.pop(next(iter(self._taken)))
        self._taken[task.id] = (time.monotonic(), key)

    def answered(self, task: Task, outcome: str) -> None:
        """A result of ``task`` was accepted: ``outcome`` is ``succeeded`` or ``failed``."""
        started = self._taken.pop(task.id, None)
        key = started[1] if started is not None else key_of(task)
        if started is not None:
            self._ran.setdefault(key, _Histogram()).observe(time.monotonic() - started[0])
        self._results[(key, outcome)] = self._results.get((key, outcome), 0) + 1

    def collect(self) -> Iterator[Metric]:
        from prometheus_client.core import CounterMetricFamily, HistogramMetricFamily

        for name, what, histograms in (
                ("flowli_stage_schedule_to_start_seconds",
                 "Seconds a stage's job waited in its queue before a worker took it, in this process.", self._waited),
                ("flowli_stage_duration_seconds",
                 "Seconds from a worker taking a stage's job to its accepted result, in this process.", self._ran)):
            family = HistogramMetricFamily(name, what, labels=LABELS)
            for key, h in sorted(histograms.items()):
                family.add_metric(list(key), h.buckets(), sum_value=h.total)
            yield family
        results = CounterMetricFamily("flowli_stage_results", "Stage results accepted in this process, by outcome.",
                                      labels=[*LABELS, "outcome"])
        for (key, outcome), n in sorted(self._results.items()):
            results.add_metric([*key, outcome], n)
        yield results
