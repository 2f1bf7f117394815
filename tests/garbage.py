"""What the cyclic collector finds: a test enters ``Garbage()`` around the work it checks, and
reads the flowli objects that only the collector could free (those that reference counting
left, held in a reference cycle)."""

from __future__ import annotations

import collections
import gc
from typing import Any


def _origin(o: Any) -> str | None:
    """The flowli name of a collected object (a function's, or an instance's class), else None."""
    if callable(o) and hasattr(o, "__qualname__") and str(getattr(o, "__module__", "")).startswith("flowli"):
        return f"{o.__module__}.{o.__qualname__}"
    module = getattr(type(o), "__module__", "") or ""
    return f"{module}.{type(o).__qualname__}" if module.startswith("flowli") else None


class Garbage:
    """What the cyclic collector found unreachable while it was entered (kept for inspection:
    ``gc.DEBUG_SAVEALL``), by flowli name."""

    def __init__(self) -> None:
        self.found: collections.Counter[str] = collections.Counter()
        self._before: set[int] = set()

    def __enter__(self) -> Garbage:
        gc.collect()
        # what exists already is not of the work checked (an earlier test's engine may become
        # garbage meanwhile): only objects made inside count
        self._before = {id(o) for o in gc.get_objects()}
        gc.set_debug(gc.DEBUG_SAVEALL)
        return self

    def __exit__(self, *exc: Any) -> None:
        try:
            gc.collect()
            made = (o for o in gc.garbage if id(o) not in self._before)
            self.found.update(name for name in map(_origin, made) if name is not None)
        finally:
            gc.set_debug(0)
            gc.garbage.clear()
