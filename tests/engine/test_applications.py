"""Principals and tenancy: executions, tasks and messages carry an application; children
inherit it; every read and write scoped by ``application=`` (or a principal's application)
treats another application's ids as unknown, exactly as missing ones."""

from __future__ import annotations

import pytest

from flowli import Context, Principal, Registry
from flowli.domain import DEFAULT_APPLICATION, StepFailed, UnknownExecutionError, belongs

from .conftest import wait_status

pytestmark = pytest.mark.integration

ACME = Principal("ann@acme.example", roles=("operator",), application="acme")
GLOBEX = Principal("gil@globex.example", roles=("operator",), application="globex")


def app() -> Registry:
    registry = Registry()

    @registry.workflow("parent")
    async def parent(ctx: Context, n: int) -> dict:
        got = await ctx.receive("go")
        child = await ctx.child("child", n)
        return {"got": got, "child": child}

    @registry.workflow("child")
    async def child(ctx: Context, n: int) -> int:
        return n * 2

    @registry.workflow("listener")
    async def listener(ctx: Context) -> object:
        return await ctx.receive("rates", scope="global")

    @registry.workflow("versions", version="1")
    async def v1(ctx: Context) -> str:
        await ctx.receive("go")
        return "one"

    @registry.workflow("versions", version="2")
    async def v2(ctx: Context) -> str:
        await ctx.receive("go")
        return "two"

    return registry


async def unknown_as_missing(call, eid: str) -> None:
    with pytest.raises(UnknownExecutionError) as refused:
        await call
    assert str(refused.value) == f"unknown execution {eid}"


async def test_an_execution_belongs_to_the_application_of_its_principal_and_its_children_too(open_engine):
    async with open_engine(app()) as engine:
        eid = await engine.start("parent", 3, by=ACME)
        assert (await engine.status(eid)).application == "acme"
        assert (await engine.status(eid, application="acme")).eid == eid
        await wait_status(engine, eid, "suspended")
        await engine.signal(eid, "go", "yes", by=ACME)
        assert await engine.result(eid, timeout=30, application="acme") == {"got": "yes", "child": 6}
        child_eid = (await engine.journal(eid))
        [started] = [e for e in child_eid if e.kind.value == "frame.started" and e.fid == "root/child#0"]
        child = await engine.status(started.value["child"])
        assert child.application == "acme" and child.parent_eid == eid
        [message] = await engine.messages(eid, "go")
        assert message.application == "acme"
        tasks = await engine.tasks(eid=eid, include_acked=True)
        assert tasks and {t.application for t in tasks} == {"acme"}


async def test_every_read_and_write_of_another_application_says_unknown_as_for_a_missing_id(open_engine):
    async with open_engine(app()) as engine:
        eid = await engine.start("versions", version="1", by=ACME)
        await wait_status(engine, eid, "suspended")
        missing = "01234567-89ab-7cde-8f01-23456789abcd"
        for target in (eid, missing):
            await unknown_as_missing(engine.status(target, application="globex"), target)
            await unknown_as_missing(engine.journal(target, application="globex"), target)
            await unknown_as_missing(engine.result(target, timeout=1, application="globex"), target)
            await unknown_as_missing(engine.signal(target, "go", "no", by=GLOBEX), target)
            await unknown_as_missing(engine.cancel(target, by=GLOBEX), target)
            await unknown_as_missing(engine.migrate(target, "2", by=GLOBEX), target)
        assert await engine.statuses([eid], application="globex") == []
        assert await engine.tasks(eid=eid, application="globex", include_acked=True) == []
        # nothing of it reached acme's execution
        assert await engine.messages(eid, "go") == []
        record = await engine.status(eid)
        assert (record.cancel_requested, record.version) == (None, "1")
        await engine.signal(eid, "go", "ok", by=ACME)
        assert await engine.result(eid, timeout=30) == "one"


async def test_a_key_is_the_applications_own(open_engine):
    async with open_engine(app()) as engine:
        a = await engine.start("child", 1, key="order-7", by=ACME)
        b = await engine.start("child", 1, key="order-7", by=GLOBEX)
        assert a != b
        assert await engine.start("child", 1, key="order-7", application="acme") == a
        assert (await engine.status(b)).application == "globex"


async def test_a_global_channel_is_the_applications_own(open_engine):
    async with open_engine(app()) as engine:
        acme = await engine.start("listener", by=ACME)
        globex = await engine.start("listener", by=GLOBEX)
        await wait_status(engine, acme, "suspended")
        await wait_status(engine, globex, "suspended")
        await engine.broadcast("rates", {"eur": 1.1}, by=GLOBEX)
        assert await engine.result(globex, timeout=30) == {"eur": 1.1}
        assert (await engine.status(acme)).status.value == "suspended"
        await engine.broadcast("rates", {"eur": 2.2}, by=ACME)
        assert await engine.result(acme, timeout=30) == {"eur": 2.2}


async def test_an_application_given_beside_a_principal_of_another_is_refused(open_engine):
    async with open_engine(app()) as engine:
        with pytest.raises(ValueError, match="application 'globex' differs from the application 'acme'"):
            await engine.start("child", 1, by=ACME, application="globex")


async def test_a_principal_needs_an_id_and_roles_as_names():
    with pytest.raises(ValueError, match="non-empty string"):
        Principal("")
    with pytest.raises(ValueError, match="sequence of role names"):
        Principal("x", roles="admin")  # type: ignore[arg-type]
    assert Principal("x", roles=["viewer"]).roles == ("viewer",)


async def test_a_failed_childs_error_still_reaches_its_parent_in_its_application(open_engine):
    registry = app()

    @registry.workflow("breaks")
    async def breaks(ctx: Context) -> None:
        raise ValueError("no")

    @registry.workflow("wraps")
    async def wraps(ctx: Context) -> str:
        try:
            await ctx.child("breaks")
        except StepFailed as failed:
            return failed.error_type
        return "?"

    async with open_engine(registry) as engine:
        eid = await engine.start("wraps", application="acme")
        assert await engine.result(eid, timeout=30) == "ValueError"


async def test_the_list_and_its_counts_are_the_applications_own(open_engine):
    async with open_engine(app()) as engine:
        mine = [await engine.start("child", n, by=ACME) for n in range(3)]
        theirs = [await engine.start("child", n, by=GLOBEX) for n in range(2)]
        for eid in mine + theirs:
            await engine.result(eid, timeout=30)
        page = await engine.list(application="acme")
        assert {r.eid for r in page} == set(mine) and {r.application for r in page} == {"acme"}
        assert page.counts["completed"] == 3
        assert {r.eid for r in await engine.list(application="globex")} == set(theirs)
        assert len(await engine.list()) == 5  # single-tenant use sees every execution


async def test_the_review_inbox_is_the_applications_own(open_engine):
    from flowli.patterns import answer_review, inbox, review

    registry = app()

    @registry.workflow("asks")
    async def asks(ctx: Context, what: str) -> object:
        return await review(ctx, what)

    async with open_engine(registry) as engine:
        mine = await engine.start("asks", "acme's", by=ACME)
        theirs = await engine.start("asks", "globex's", by=GLOBEX)
        from ..crash import until

        await until(lambda: _both(engine), 40, "both reviews in the inbox")
        assert [r.eid for r in await inbox(engine, application="acme")] == [mine]
        assert [r.eid for r in await inbox(engine, application="globex")] == [theirs]
        with pytest.raises(UnknownExecutionError):
            await answer_review(engine, mine, True, by=GLOBEX)
        await answer_review(engine, mine, True, by=ACME)
        assert (await engine.result(mine, timeout=30))["by"] == ACME.id


async def _both(engine) -> bool:
    from flowli.patterns import inbox

    return len(await inbox(engine)) == 2


async def test_an_execution_started_without_an_application_is_the_default_applications(open_engine):
    # the embedded user's start: no principal, no application; reads scoped to "default" see it,
    # reads scoped to another application never do, and the default application's list counts it
    async with open_engine(app(), worker=False) as engine:
        bare = await engine.start("parent", 1)
        acme = await engine.start("parent", 2, by=ACME)
        assert (await engine.status(bare)).application is None
        assert (await engine.status(bare, application=DEFAULT_APPLICATION)).eid == bare
        with pytest.raises(UnknownExecutionError):
            await engine.status(acme, application=DEFAULT_APPLICATION)
        with pytest.raises(UnknownExecutionError):
            await engine.status(bare, application="acme")
        listed = await engine.list(application=DEFAULT_APPLICATION)
        assert [s.eid for s in listed] == [bare] and listed.counts["pending"] + listed.counts["running"] == 1
        assert [r.eid for r in await engine.statuses([bare, acme], application=DEFAULT_APPLICATION)] == [bare]
        assert [e.eid for e in await engine.journal(bare, application=DEFAULT_APPLICATION)][:1] == [bare]
        assert belongs(None, DEFAULT_APPLICATION) and not belongs(None, "acme") and belongs("acme", None)
