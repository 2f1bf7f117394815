"""A process holds the last state it wrote for a decider's execution (its next command reads the
stored version, not the state) until another process advances it: then it reads and decodes the
state again. On both backends, two engines on one database take turns on a counter; each sum is
the sum of every command, whichever engine applied the one before."""

from __future__ import annotations

from typing import Any

import pytest

import flowli
from flowli import Registry
from flowli.engine.deciders import Event, Signal, Start
from flowli.testing import store_of

from .conftest import FAST, wait_status

pytestmark = pytest.mark.integration


def registry() -> Registry:
    reg = Registry()

    def decide(state: dict[str, Any], command: Any) -> tuple[list[Event], list[Any]]:
        if isinstance(command, Start):
            return [Event("opened", {})], []
        if isinstance(command, Signal):
            return [Event("added", {"n": command.payload})], []
        return [], []

    def evolve(state: dict[str, Any], event: Event) -> dict[str, Any]:
        return {"total": state["total"] + (event.data or {}).get("n", 0), "count": state["count"] + 1}

    reg.decider("counter", initial={"total": 0, "count": 0}, evolve=evolve)(decide)
    return reg


async def test_two_processes_taking_turns_each_see_the_others_commands(db_url: str, tmp_path: Any) -> None:
    one = await flowli.connect(db_url, registry(), bucket=str(tmp_path / "b1"), **FAST)
    two = await flowli.connect(db_url, registry(), bucket=str(tmp_path / "b2"), **FAST)
    async with one, two, one.worker():
        eid = await one.start("counter", None)
        await wait_status(one, eid, "suspended")
        decoded: list[int] = []
        for engine in (one, two):
            store, read = store_of(engine), store_of(engine).read_state

            async def counted(eid_: str, held: Any = None, read: Any = read) -> Any:
                got = await read(eid_, held)
                decoded.append(int(got is not None and got[1] is not flowli.store.HELD))
                return got

            store.read_state = counted  # type: ignore[method-assign]  # counted on the instance
        total = 0
        for i, engine in enumerate([one, one, two, one, two, two, one]):
            await engine.signal(eid, "add", i + 1)
            total += i + 1
            assert await engine.decider_state(eid) == (i + 2, {"total": total, "count": i + 2})
        # a state is decoded only when the other process wrote the one before (and for the
        # decider_state reads of this test, which never hold one)
        commands = decoded[0::2]
        assert commands == [0, 0, 1, 1, 1, 0, 1]
