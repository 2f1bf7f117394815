"""An execution's error comes back from ``engine.result`` as itself only when its type is on the
allowlist (flowli's own errors, the built-in exceptions, the types a registry declares); anything
else is ExecutionFailed with the stored type name and message, and stored error data never makes
flowli import a module."""

from __future__ import annotations

import sys
from typing import Any

import pytest

from flowli import Context, Registry
from flowli.domain import ExecutionFailed, Status, UnknownWorkflowError
from flowli.store import StatusChange, Write
from flowli.testing import store_of


class LedgerClosed(Exception):
    pass


class NotDeclared(Exception):
    pass


def app() -> Registry:
    registry = Registry()
    registry.error(LedgerClosed)

    @registry.workflow("closes")
    async def closes(ctx: Context) -> None:
        raise LedgerClosed("the ledger is closed")

    @registry.workflow("undeclared")
    async def undeclared(ctx: Context) -> None:
        raise NotDeclared("a type of the application's own, not declared")

    @registry.workflow("builtin")
    async def builtin(ctx: Context) -> None:
        raise KeyError("missing")

    @registry.workflow("waits")
    async def waits(ctx: Context) -> None:
        await ctx.receive("never")

    return registry


@pytest.mark.integration
async def test_declared_builtin_and_flowli_errors_come_back_as_themselves_others_as_execution_failed(open_engine):
    async with open_engine(app()) as engine:
        with pytest.raises(LedgerClosed, match="the ledger is closed"):
            await engine.result(await engine.start("closes"), timeout=30)
        with pytest.raises(KeyError):
            await engine.result(await engine.start("builtin"), timeout=30)
        with pytest.raises(ExecutionFailed, match="NotDeclared: a type of the application's own") as failed:
            await engine.result(await engine.start("undeclared"), timeout=30)
        assert failed.value.error_type == "NotDeclared"


@pytest.mark.integration
@pytest.mark.parametrize(("module", "name"), [("os", "system"), ("this", "Zen"), ("subprocess", "Popen"),
                                               ("tests.engine.test_errors", "NotDeclared")])
async def test_stored_error_data_naming_a_module_imports_nothing(open_engine, module, name):
    async with open_engine(app(), worker=False) as engine:
        eid = await engine.start("waits")
        error = {"type": name, "module": module, "message": "rm -rf /"}
        await store_of(engine).write(Write(status=StatusChange(eid, Status.FAILED, error=error)), engine.clock.now())
        before = set(sys.modules)
        with pytest.raises(ExecutionFailed, match=f"{name}: rm -rf /"):
            await engine.result(eid, timeout=5)
        assert set(sys.modules) == before, "nothing was imported"


def declares_nothing() -> Registry:
    registry = Registry()

    @registry.workflow("waits")
    async def waits(ctx: Context) -> None:
        await ctx.receive("never")

    return registry


async def failed_with(engine: Any, error: dict[str, str]) -> BaseException:
    """The exception ``engine.result`` raises for a new execution failed with ``error`` (its data)."""
    eid = await engine.start("waits")
    await store_of(engine).write(Write(status=StatusChange(eid, Status.FAILED, error=error)), engine.clock.now())
    with pytest.raises(Exception) as raised:
        await engine.result(eid, timeout=5)
    return raised.value


@pytest.mark.integration
async def test_rebuild_error_without_a_declaration_and_of_flowli_errors(open_engine):
    async with open_engine(declares_nothing(), worker=False) as engine:
        unknown = await failed_with(engine, {"type": "UnknownWorkflowError", "module": UnknownWorkflowError.__module__, "message": "x"})
        assert isinstance(unknown, UnknownWorkflowError)  # flowli's own, rebuilt even when its constructor differs
        assert isinstance(await failed_with(engine, {"type": "ValueError", "module": "builtins", "message": "v"}), ValueError)
        assert isinstance(await failed_with(engine, {"type": "LedgerClosed", "module": __name__, "message": "m"}),
                          ExecutionFailed)
    with pytest.raises(Exception, match="Exception subclass"):
        Registry().error(int)  # type: ignore[arg-type]
