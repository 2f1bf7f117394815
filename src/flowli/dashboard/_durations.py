"""A duration as every page of the dashboard says it: milliseconds under a second, then seconds,
minutes, hours; "so far" for one that has not ended."""

from __future__ import annotations


def took(seconds: float, ended: bool = True) -> str:
    """``seconds`` in words: ``350 ms``, ``4.2 s``, ``3.5 min``, ``2.0 h`` (``... so far`` unless ``ended``)."""
    seconds = max(0.0, seconds)
    text = f"{seconds * 1000:.0f} ms" if seconds < 1 else f"{seconds:.1f} s" if seconds < 120 else \
        f"{seconds / 60:.1f} min" if seconds < 7200 else f"{seconds / 3600:.1f} h"
    return text if ended else f"{text} so far"
