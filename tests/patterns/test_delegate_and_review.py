"""delegate and review under normal runs: a consumer (or a person, through the inbox) answers,
the execution receives the answer, and the answer carries the provenance of who gave it."""

from __future__ import annotations

from typing import Any

import pytest

from flowli import Context, Registry
from flowli.domain import EntryKind, NoOpenReviewError, TaskKind, UnknownTaskError, task_id
from flowli.patterns import REVIEW_QUEUE, answer_review, delegate, inbox, review

from ..crash import until

pytestmark = pytest.mark.integration


def registry_of_patterns() -> Registry:
    registry = Registry()

    @registry.workflow("scoring")
    async def scoring(ctx: Context, applicant: str) -> Any:
        return await delegate(ctx, "risk-models", {"applicant": applicant}, key="score")

    @registry.workflow("approve_invoice")
    async def approve_invoice(ctx: Context, invoice: dict[str, Any]) -> Any:
        return await review(ctx, f"invoice {invoice['id']}", invoice)

    return registry


def answer_entry(journal: list[Any], fid: str = "root/delegate:score") -> Any:
    """The frame.completed of the delegate frame: the answer, with the answerer's provenance."""
    [entry] = [e for e in journal if e.kind is EntryKind.FRAME_COMPLETED and e.fid == fid]
    return entry


@pytest.mark.parametrize(("by", "actor"), [
    ("risk-agent", "system:risk-agent"),
    ("dora@example.com", "human:dora@example.com"),
    (None, "system:model-runner"),  # no by: the consumer itself answers
])
async def test_delegate_returns_the_answer_of_a_consumer_with_its_provenance(open_engine, by, actor):
    async with open_engine(registry_of_patterns()) as engine:
        eid = await engine.start("scoring", "ann")
        consumer = engine.consumer("risk-models", "model-runner")
        [task] = await until(consumer.dequeue, 20, "the DELEGATE task on queue risk-models")
        assert task.id == task_id(TaskKind.DELEGATE, eid, "root/delegate:score@1")
        assert (task.kind, task.eid, task.payload, task.lease_owner) == (TaskKind.DELEGATE, eid, {"applicant": "ann"}, "model-runner")

        await consumer.answer(task, {"score": 0.93}, by=by)
        assert await engine.result(eid, timeout=30) == {"score": 0.93}

        entry = answer_entry(await engine.journal(eid))
        assert entry.value == {"score": 0.93} and str(entry.provenance.actor) == actor and entry.attempt == 1
        assert await engine.tasks(queue="risk-models") == []  # the answer acked the task


async def test_engine_answer_resumes_a_delegate_and_a_second_answer_finds_no_task(open_engine):
    async with open_engine(registry_of_patterns()) as engine:
        eid = await engine.start("scoring", "bob")
        tid = task_id(TaskKind.DELEGATE, eid, "root/delegate:score@1")
        await until(lambda: engine.tasks(queue="risk-models"), 20, "the DELEGATE task")
        await engine.answer(tid, {"score": 0.1}, by="analyst@example.com")
        assert await engine.result(eid, timeout=30) == {"score": 0.1}
        assert str(answer_entry(await engine.journal(eid)).provenance.actor) == "human:analyst@example.com"
        with pytest.raises(UnknownTaskError, match=tid):
            await engine.answer(tid, {"score": 0.2}, by="analyst@example.com")


async def test_review_is_listed_in_the_inbox_then_answered_by_a_person(open_engine):
    invoice = {"id": "inv-42", "amount": 1250}
    async with open_engine(registry_of_patterns()) as engine:
        eid = await engine.start("approve_invoice", invoice, by="alice@example.com")
        [opened] = await until(lambda: inbox(engine), 20, "the review in the inbox")
        assert (opened.eid, opened.subject, opened.data, opened.queue) == (eid, "invoice inv-42", invoice, REVIEW_QUEUE)
        assert opened.closed_at is None and opened.answer is None
        [task] = await engine.tasks(queue=REVIEW_QUEUE)
        assert opened.frame == "root/delegate#0" and task.frame["fid"] == opened.frame
        assert task.payload == {"review": "invoice inv-42", "data": invoice}

        await answer_review(engine, eid, True, by="carol@example.com", reason="ok")
        answer = {"approved": True, "reason": "ok", "by": "carol@example.com"}
        assert await engine.result(eid, timeout=30) == answer

        journal = await engine.journal(eid)
        entry = answer_entry(journal, "root/delegate#0")
        assert str(entry.provenance.actor) == "human:carol@example.com" and entry.value == answer
        done = [e.fid for e in journal if e.kind is EntryKind.FRAME_COMPLETED]
        assert sorted(done) == ["root/announce#0", "root/announce#1", "root/delegate#0"]  # opened, answered, closed
        assert done[-1] == "root/announce#1"
        assert await inbox(engine) == []
        [closed] = await inbox(engine, open_only=False)
        assert closed.frame == opened.frame and closed.closed_at is not None and closed.answer == answer
        assert await engine.tasks(queue=REVIEW_QUEUE) == []
        with pytest.raises(NoOpenReviewError, match=eid):
            await answer_review(engine, eid, False, by="carol@example.com")


async def test_a_rejected_review_carries_the_reason(open_engine):
    async with open_engine(registry_of_patterns()) as engine:
        eid = await engine.start("approve_invoice", {"id": "inv-9"})
        await until(lambda: inbox(engine), 20, "the review in the inbox")
        await answer_review(engine, eid, False, by="erin@example.com", reason="duplicate invoice")
        assert await engine.result(eid, timeout=30) == {
            "approved": False, "reason": "duplicate invoice", "by": "erin@example.com",
        }
        assert str(answer_entry(await engine.journal(eid), "root/delegate#0").provenance.actor) == \
            "human:erin@example.com"
