"""The kinds of entry: which of them the control log holds."""

from __future__ import annotations

import pytest

from flowli.domain import EntryKind

pytestmark = pytest.mark.unit


def test_the_control_log_holds_the_execution_kinds_and_no_other():
    assert {k for k in EntryKind if k.lifecycle} == {
        EntryKind.EXECUTION_STARTED, EntryKind.EXECUTION_SUSPENDED, EntryKind.EXECUTION_RESUMED,
        EntryKind.EXECUTION_COMPLETED, EntryKind.EXECUTION_FAILED, EntryKind.EXECUTION_CANCELLED,
        EntryKind.EXECUTION_MIGRATED, EntryKind.EXECUTION_RETRIED, EntryKind.CANCEL_REQUESTED}
    # a kind read back from its stored text is the same member, with the same answer
    assert EntryKind("execution.completed").lifecycle is True
    assert EntryKind("frame.completed").lifecycle is False and EntryKind("event").lifecycle is False
