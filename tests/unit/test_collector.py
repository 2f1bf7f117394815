"""The garbage collector of a process that runs nothing but flowli (``flowli serve``, ``flowli
worker``): tuned while it runs, as it was after."""

from __future__ import annotations

import gc

import pytest

from flowli.engine import COLLECTOR_THRESHOLDS, tuned_collector

pytestmark = pytest.mark.unit


def test_the_collector_is_tuned_while_serving_and_given_back_after():
    before = gc.get_threshold()
    assert before != COLLECTOR_THRESHOLDS
    kept = [[i] for i in range(100)]  # made before: frozen out of the scans while it serves
    with tuned_collector():
        assert gc.get_threshold() == COLLECTOR_THRESHOLDS
        assert gc.get_freeze_count() >= len(kept)
    assert gc.get_threshold() == before
    assert gc.get_freeze_count() == 0
