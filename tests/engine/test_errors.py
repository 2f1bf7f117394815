"""An execution's error comes back from ``engine.result`` as itself only when its type is on the
allowlist (flowli's own errors, the built-in exceptions, the types a registry declares); anything
else is ExecutionFailed with the stored type name and message, and stored error data never makes
flowli import a module."""

from __future__ import annotations

import sys

import pytest

from flowli import Context, Registry
from flowli.domain import ExecutionFailed, Status, UnknownWorkflowError
from flowli.engine._errors import rebuild_error
from flowli.store import StatusChange, Write


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
        await engine._store.write(Write(status=StatusChange(eid, Status.FAILED, error=error)), engine.clock.now())
        before = set(sys.modules)
        with pytest.raises(ExecutionFailed, match=f"{name}: rm -rf /"):
            await engine.result(eid, timeout=5)
        assert set(sys.modules) == before, "nothing was imported"


@pytest.mark.unit
def test_rebuild_error_without_a_registry_and_of_flowli_errors():
    unknown = rebuild_error("e", {"type": "UnknownWorkflowError", "module": "flowli.domain._errors", "message": "x"})
    assert isinstance(unknown, UnknownWorkflowError)  # flowli's own, rebuilt even when its constructor differs
    assert isinstance(rebuild_error("e", {"type": "ValueError", "module": "builtins", "message": "v"}), ValueError)
    assert isinstance(rebuild_error("e", {"type": "LedgerClosed", "module": __name__, "message": "m"}), ExecutionFailed)
    with pytest.raises(Exception, match="Exception subclass"):
        Registry().error(int)  # type: ignore[arg-type]
