"""The cyclic garbage collector of a process that does nothing but run flowli (``flowli serve``,
``flowli worker``). A program that runs an engine beside its own work keeps its own settings."""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator

COLLECTOR_THRESHOLDS = (50_000, 20, 100)
"""The collector's thresholds while such a process runs (Python's own: 700, 10, 10). A request, a
step or a decision allocates thousands of short-lived containers, few of them ever in a cycle (they
are freed by their counts), so at Python's thresholds a young collection ran every few requests and
scanned what they had allocated, and a full one ran whenever the objects that outlived a few had
grown by a quarter, which in a process that imported little came often. Measured (``bench.http``,
SQLite, n = 4 000, alternated with the code before): the service's CPU a stage 1.72 ms against
1.54 for H1B, 3.05 against 2.85 for H1; W2 in one process spends about a quarter of its time in
the collector at Python's thresholds (``bench/RESULTS.md``)."""


@contextlib.contextmanager
def tuned_collector() -> Iterator[None]:
    """What the process imported and built before it runs is kept out of the collector's scans
    (``gc.freeze``), and collections run far less often (``COLLECTOR_THRESHOLDS``); Python's
    settings come back after."""
    before = gc.get_threshold()
    gc.freeze()
    gc.set_threshold(*COLLECTOR_THRESHOLDS)
    try:
        yield
    finally:
        gc.set_threshold(*before)
        gc.unfreeze()
