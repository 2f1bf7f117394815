"""The public surface that DESIGN.md fixes: tests outside the project import these names."""

from __future__ import annotations

import inspect

import flowli
import flowli.domain
from flowli import Context, Engine, Registry


def test_top_level_names():
    assert sorted(flowli.__all__) == ["Context", "Engine", "Options", "Registry", "connect"]
    assert inspect.iscoroutinefunction(flowli.connect)


def test_domain_names():
    for name in ["RetryPolicy", "NonRetryableError", "StepFailed", "DuplicateFrameError", "NondeterminismError",
                 "Cancelled", "LeaseLost", "Status"]:
        assert hasattr(flowli.domain, name), name
    # control flow survives a user's `except Exception:`
    assert not issubclass(flowli.domain.Cancelled, Exception)
    assert not issubclass(flowli.domain.LeaseLost, Exception)
    assert [s.value for s in flowli.domain.Status] == ["pending", "running", "suspended", "completed", "failed", "cancelled"]


def test_engine_methods_are_coroutines_but_worker():
    for name in ["start", "status", "result", "signal", "broadcast", "cancel", "journal", "migrate", "list", "run_worker"]:
        assert inspect.iscoroutinefunction(getattr(Engine, name)), name
    assert not inspect.iscoroutinefunction(Engine.worker)


def test_context_methods():
    for name in ["step", "child", "receive", "sleep", "sleep_until", "gather", "now", "random", "uuid", "send",
                 "announce", "enqueue", "withdraw"]:
        assert callable(getattr(Context, name)), name
    assert callable(Registry().workflow)
