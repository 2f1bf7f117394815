"""``flowli.dag`` is a decider: its journal speaks the run's words, folding its events gives its
stored state (what the views read), a cancel fails it with its gate's step, a denied run retried
fails again without compensating twice."""

from __future__ import annotations

from typing import Any

import pytest

from flowli.catalog import Catalog
from flowli.domain import EntryKind

from .app import app, effects
from .test_remediation import gated, parked

pytestmark = pytest.mark.integration


async def _events(engine: Any, wid: str) -> list[tuple[str, Any]]:
    return [(e.value["event"], e.value["data"]) for e in await engine.journal(wid) if e.kind is EntryKind.EVENT]


async def _folds(engine: Any, wid: str) -> dict[str, Any]:
    from flowli.engine.deciders import Event

    decider = engine.registry.decider_of("flowli.dag")
    _, state = await engine.decider_state(wid)
    assert decider.fold(Event(k, d) for k, d in await _events(engine, wid)) == state
    return dict(state)


async def test_a_parked_run_journals_its_words_and_its_events_fold_to_its_state(open_engine):
    async with open_engine(app()) as engine:
        catalog = Catalog(engine)
        await catalog.save_composition(gated())
        wid = (await catalog.start("virtual.gated@1", {"bucket": "locked-5"}))["workflow_id"]
        await parked(catalog, engine, wid)
        assert (await engine.status(wid)).version == "2"
        words = [k for k, _ in await _events(engine, wid)]
        assert words[:3] == ["dag.started", "layer.started", "step.started"] and words[-1] == "step.parked"
        assert {"step.completed", "step.failed"} <= set(words)
        state = await _folds(engine, wid)
        assert state["gate"]["step"] == "tag" and state["phase"] == "parked"
        history = await catalog.history(wid, include_state_data=True)
        parked_row = next(h for h in history if h["event"] == "step.parked")
        assert parked_row["state"] == "remediation_pending" and parked_row["step"] == "tag"
        assert parked_row["state_data"]["remediation"]["step"] == "tag"
        # a resolution for another gate is no answer: the run stays parked
        await engine.signal(wid, "resolution", {"resolution": "remediated", "fid": "create"})
        assert (await catalog.status(wid))["status"] == "remediation_pending"
        # cancelled while parked: FAILED, the parked step failed with it
        await engine.cancel(wid, by="olga@example.com")
        await engine.wait_suspended(wid, timeout=10)
        view = await catalog.status(wid)
        assert view["status"] == "FAILED" and view["reason"]["code"] == "CANCELLED"
        assert {s["name"]: s["status"] for s in view["steps"]} == {
            "create": "COMPLETED", "version": "COMPLETED", "tag": "FAILED"}
        await _folds(engine, wid)


async def test_a_denied_run_retried_fails_again_without_compensating_twice(open_engine):
    async with open_engine(app()) as engine:
        catalog = Catalog(engine)
        await catalog.save_composition(gated())
        wid = (await catalog.start("virtual.gated@1", {"bucket": "locked-6"}))["workflow_id"]
        await parked(catalog, engine, wid)
        await catalog.resolve(wid, "denied")
        with pytest.raises(Exception, match="remediation denied"):
            await engine.result(wid, timeout=20)
        retried = await catalog.retry(wid)
        assert retried["status"] == "PENDING" and retried["step"] == "tag"
        with pytest.raises(Exception, match="remediation denied"):
            await engine.result(wid, timeout=20)
        assert (await catalog.status(wid))["reason"]["code"] == "REMEDIATION_DENIED"
        assert [e for e in effects() if e.startswith(("unversion:", "delete:"))] == [
            "unversion:locked-6", "delete:locked-6"]
        words = [k for k, _ in await _events(engine, wid)]
        assert words.count("step.compensated") == 2 and words[-2:] == ["dag.retried", "dag.failed"]
        await _folds(engine, wid)


async def test_a_list_of_dag_runs_reads_their_states_once_for_the_page_never_run_by_run(open_engine):
    """The list shows each running dag run's stored state, read for the whole page at once: no
    read names one of its runs (its record, journal, state or messages), whatever the page's size."""
    from flowli.testing import store_of

    async with open_engine(app()) as engine:
        catalog = Catalog(engine)
        await catalog.save_composition(gated())
        wids = [(await catalog.start("virtual.gated@1", {"bucket": f"locked-{i}"}))["workflow_id"] for i in range(5)]
        for wid in wids:
            await parked(catalog, engine, wid)
        store = store_of(engine)
        base = type(store)
        per_run: list[tuple[str, str]] = []
        batches: list[str] = []

        class Counting(base):  # type: ignore[valid-type,misc]
            """The same store, the reads that a list could make run by run counted."""

            async def read_execution(self, eid: str) -> Any:
                per_run.append(("read_execution", eid))
                return await super().read_execution(eid)

            async def read_state(self, eid: str) -> Any:
                per_run.append(("read_state", eid))
                return await super().read_state(eid)

            async def read_journal(self, eid: str, after: int = 0) -> Any:
                per_run.append(("read_journal", eid))
                return await super().read_journal(eid, after)

            async def read_journal_page(self, eid: str, *args: Any) -> Any:
                per_run.append(("read_journal_page", eid))
                return await super().read_journal_page(eid, *args)

            async def read_messages(self, channel: str, *args: Any) -> Any:
                per_run.append(("read_messages", channel))
                return await super().read_messages(channel, *args)

            async def read_executions(self, eids: Any) -> Any:
                batches.append("read_executions")
                return await super().read_executions(eids)

            async def read_states_of(self, eids: Any) -> Any:
                batches.append("read_states_of")
                return await super().read_states_of(eids)

        store.__class__ = Counting
        try:
            small = (await catalog.list(workflow_type="virtual.gated@1", limit=2))["runs"]
            small_batches, batches[:] = list(batches), []
            listed = (await catalog.list(workflow_type="virtual.gated@1", limit=5))["runs"]
        finally:
            store.__class__ = base
        assert [r["workflow_id"] for r in listed] == list(reversed(wids)) and len(small) == 2
        assert {r["status"] for r in listed} == {"remediation_pending"}
        assert [(what, eid) for what, eid in per_run if any(eid.startswith(w) for w in wids)] == []
        assert batches == small_batches == ["read_executions", "read_states_of"]
        for run in listed:  # the list's state of each run is its view's
            assert (await catalog.status(run["workflow_id"]))["status"] == run["status"]


async def test_the_dag_decider_shares_its_state_and_never_changes_one_in_place(open_engine):
    """``flowli.dag`` is registered with ``shares``: the engine checks its state only where an
    event changed it, which holds only if evolve never changes a state it was given."""
    import copy

    from flowli.engine.deciders import Event

    async with open_engine(app()) as engine:
        catalog = Catalog(engine)
        await catalog.save_composition(gated())
        wid = (await catalog.start("virtual.gated@1", {"bucket": "locked-9"}))["workflow_id"]
        await parked(catalog, engine, wid)
        decider = engine.registry.decider_of("flowli.dag")
        assert decider.shares
        state = decider.start_state()
        for kind, data in await _events(engine, wid):
            kept = copy.deepcopy(state)
            after = decider.evolve(state, Event(kind, data))
            assert state == kept and after is not state, kind
            state = after
        assert state == (await engine.decider_state(wid))[1]
