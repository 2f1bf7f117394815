"""Bad input: one clear error naming the workflow, frame or field; nothing journaled is lost."""

from __future__ import annotations

import pytest

import flowli
from flowli import Context, Registry
from flowli.domain import (
    ExecutionTerminalError,
    InvalidDatabaseURL,
    NotJSONCompatibleError,
    RegistrationError,
    StepFailed,
    UnknownExecutionError,
    UnknownWorkflowError,
    WorkflowArgumentsError,
)

pytestmark = pytest.mark.integration


def test_registration_rejects_a_sync_function_and_a_duplicate():
    registry = Registry()
    with pytest.raises(RegistrationError, match="'sync_wf'.*not an async function"):

        @registry.workflow("sync_wf")
        def sync_wf(ctx):  # type: ignore[no-untyped-def]
            return 1

    @registry.workflow("x", version="1")
    async def x1(ctx: Context) -> None: ...

    with pytest.raises(RegistrationError, match="'x' version '1' is registered already"):

        @registry.workflow("x", version="1")
        async def x2(ctx: Context) -> None: ...


async def test_unknown_workflow_and_version_and_bad_arguments(open_engine):
    registry = Registry()

    @registry.workflow("pay", version="1")
    async def pay(ctx: Context, amount: int, currency: str = "EUR") -> None: ...

    async with open_engine(registry, worker=False) as engine:
        with pytest.raises(UnknownWorkflowError, match="'nope'"):
            await engine.start("nope")
        with pytest.raises(UnknownWorkflowError, match="'pay' version '9'"):
            await engine.start("pay", 1, version="9")
        with pytest.raises(WorkflowArgumentsError, match=r"'pay'.*; it takes pay\(amount: int, currency: str = 'EUR'\)"):
            await engine.start("pay")
        with pytest.raises(WorkflowArgumentsError, match="'pay'"):
            await engine.start("pay", 1, "EUR", "extra")
        with pytest.raises(NotJSONCompatibleError, match=r"workflow 'pay' is not JSON-compatible: args\[0\] is of type set"):
            await engine.start("pay", {1, 2})
        assert await engine.list() == []


async def test_signal_to_unknown_or_terminal_execution(open_engine):
    registry = Registry()

    @registry.workflow("quick")
    async def quick(ctx: Context) -> int:
        return 1

    async with open_engine(registry) as engine:
        with pytest.raises(UnknownExecutionError, match="0000"):
            await engine.signal("0000-missing", "go", 1)
        eid = await engine.start("quick")
        await engine.result(eid, timeout=30)
        before = await engine.journal(eid)
        with pytest.raises(ExecutionTerminalError, match=f"{eid}.*completed"):
            await engine.signal(eid, "go", 1)
        assert await engine.journal(eid) == before
        with pytest.raises(NotJSONCompatibleError, match="payload"):
            await engine.signal(eid, "go", object())


async def test_a_step_value_that_is_not_json_fails_the_frame_naming_it(open_engine):
    registry = Registry()

    def makes_object() -> object:
        return object()

    def fine() -> int:
        return 1

    @registry.workflow("badvalue")
    async def badvalue(ctx: Context) -> None:
        await ctx.step(fine)
        await ctx.step(makes_object)

    async with open_engine(registry) as engine:
        eid = await engine.start("badvalue")
        with pytest.raises(StepFailed) as info:
            await engine.result(eid, timeout=30)
        assert info.value.fid == "root/makes_object#0"
        assert "root/makes_object#0" in info.value.message and "object" in info.value.message
        journal = await engine.journal(eid)
    assert [e.value for e in journal if e.fid == "root/fine#0" and e.kind.value == "frame.completed"] == [1]


async def test_step_arguments_that_are_not_json_name_the_step(open_engine):
    registry = Registry()

    def takes(x: object) -> None: ...

    @registry.workflow("badarg")
    async def badarg(ctx: Context) -> None:
        await ctx.step(takes, object())

    async with open_engine(registry) as engine:
        eid = await engine.start("badarg")
        with pytest.raises(NotJSONCompatibleError, match=r"step .takes. in workflow .badarg. is not JSON-compatible: args\[0\] is of type object"):
            await engine.result(eid, timeout=30)


@pytest.mark.parametrize("url", ["bogus://x", "sqlite://host/file.db", "not a url", "sqlite:///"])
async def test_malformed_database_url(url):
    with pytest.raises(InvalidDatabaseURL, match="URL"):
        await flowli.connect(url, Registry())


async def test_a_missing_postgresql_database_is_the_servers_answer_not_a_bad_url():
    from flowli.domain import DatabaseUnavailable

    from ..pg import server_url

    base = server_url().rsplit("/", 1)[0]
    with pytest.raises(DatabaseUnavailable, match='database "flowli_missing" does not exist') as missing:
        await flowli.connect(f"{base}/flowli_missing", Registry())
    assert "the URL parsed: host" in str(missing.value) and "database flowli_missing" in str(missing.value)
    assert not isinstance(missing.value, InvalidDatabaseURL)
