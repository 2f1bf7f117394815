"""``flowli demo``: an invoice approval, end to end, on the default database.

The process shows each part of the engine once: a step that fails once and is retried after a
short backoff (the retry suspends on a timer), a ``ctx.sleep``, a signal from a person that the
execution receives, and a child execution. ``registry`` is module-level, so a separate worker can
run these workflows too::

    flowli worker --app flowli.cli._demo:registry
    flowli start invoice_approval INV-7 1250 --app flowli.cli._demo:registry
    flowli signal <eid> decision '{"approved": true}' --by carol@example.com
"""

from __future__ import annotations

import asyncio
import json
import secrets
from datetime import timedelta
from typing import Any

from rich.console import Console
from rich.text import Text

from flowli.domain import Entry, EntryKind, ExecutionRecord, RetryPolicy, Status, UnknownExecutionError
from flowli.engine import Context, Engine, Registry
from flowli.log import get_logger

from ._render import STATUS_STYLE, child_eids, describe_entry, execution_view

registry = Registry()

APPROVER = "carol@example.com"
REQUESTER = "alice@example.com"
QUEUE = "demo"

_fraud_calls: dict[str, int] = {}
"""Calls of the fraud service per invoice in this process: the first one times out."""


log = get_logger("flowli.demo")


def fetch_invoice(invoice_id: str, amount: float) -> dict[str, Any]:
    return {"invoice": invoice_id, "amount": amount, "currency": "EUR", "vendor": "ACME Corp"}


def check_fraud(invoice_id: str) -> dict[str, Any]:
    """A flaky fraud-scoring service: its first call for an invoice times out."""
    calls = _fraud_calls[invoice_id] = _fraud_calls.get(invoice_id, 0) + 1
    log.info("scoring", invoice=invoice_id, call=calls)
    if calls == 1:
        raise ConnectionError("the fraud service timed out")
    return {"score": 0.03, "verdict": "clean"}


def post_to_ledger(invoice_id: str, amount: float) -> dict[str, Any]:
    return {"ledger_entry": f"LE-{invoice_id}", "amount": amount}


@registry.workflow("notify_accounting", version="1")
async def notify_accounting(ctx: Context, invoice_id: str, amount: float) -> dict[str, Any]:
    return await ctx.step(post_to_ledger, invoice_id, amount)


@registry.workflow("invoice_approval", version="1")
async def invoice_approval(ctx: Context, invoice_id: str, amount: float) -> dict[str, Any]:
    await ctx.step(fetch_invoice, invoice_id, amount)
    fraud = await ctx.step(check_fraud, invoice_id, retry=RetryPolicy(max_attempts=3, backoff=timedelta(seconds=0.2)))
    await ctx.sleep(timedelta(seconds=1))  # a cooling-off period before anyone may approve
    decision = await ctx.receive("decision")
    if not (isinstance(decision, dict) and decision.get("approved")):
        return {"invoice": invoice_id, "approved": False}
    posted = await ctx.child(notify_accounting, invoice_id, amount)
    return {"invoice": invoice_id, "approved": True, "fraud_score": fraud["score"], "ledger_entry": posted["ledger_entry"]}


_LIFECYCLE_STATUS = {
    EntryKind.EXECUTION_STARTED: Status.PENDING,
    EntryKind.EXECUTION_RESUMED: Status.RUNNING,
    EntryKind.EXECUTION_SUSPENDED: Status.SUSPENDED,
    EntryKind.EXECUTION_COMPLETED: Status.COMPLETED,
    EntryKind.EXECUTION_FAILED: Status.FAILED,
    EntryKind.EXECUTION_CANCELLED: Status.CANCELLED,
}


class Progress:
    """Prints what happens to one execution and its children as it happens, read from the
    journal and the execution records (the engine's public reads, nothing else)."""

    def __init__(self, engine: Engine, eid: str, console: Console):
        self.engine = engine
        self.eid = eid
        self.console = console
        self.printed = 0
        self.children: dict[str, Status] = {}
        self.t0 = asyncio.get_running_loop().time()

    def line(self, *parts: Any) -> None:
        elapsed = asyncio.get_running_loop().time() - self.t0
        self.console.print(Text.assemble((f"{elapsed:6.2f}s  ", "dim"), *parts))

    def entry(self, e: Entry) -> None:
        status = _LIFECYCLE_STATUS.get(e.kind)
        if status is not None:
            by = f" by {e.provenance.actor}" if e.kind is EntryKind.EXECUTION_STARTED else ""
            self.line((f"{status.value:<10}", f"bold {STATUS_STYLE[status]}"), describe_entry(e), by)
            return
        if e.kind is EntryKind.FRAME_STARTED and e.provenance.code.frame_kind == "step":
            return  # the outcome line tells the attempt
        what = {EntryKind.FRAME_STARTED: "started", EntryKind.FRAME_COMPLETED: "completed",
                EntryKind.FRAME_FAILED: "failed"}.get(e.kind, e.kind.value)
        attempt = f" attempt {e.attempt}" if e.provenance.code.frame_kind == "step" and e.attempt else ""
        style = {"failed": "red", "completed": "green"}.get(what, "")
        self.line("  ", f"{e.provenance.code.frame_kind} {e.fid}{attempt} ", (what, style), " ", describe_entry(e))

    async def poll(self) -> tuple[ExecutionRecord, list[Entry]]:
        # the record before the journal: a record read as ended then comes with every entry up
        # to its end (read the other way round, the run could end between the two reads and
        # the journal printed would stop short of it)
        record = await self.engine.status(self.eid)
        entries = await self.engine.journal(self.eid)
        # a child ends before its parent resumes: show the children known already first
        await self.poll_children(list(self.children))
        for e in entries[self.printed:]:
            self.entry(e)
        self.printed = len(entries)
        await self.poll_children(child_eids(entries))
        return record, entries

    async def poll_children(self, eids: list[str]) -> None:
        for ceid in eids:
            try:
                child = await self.engine.status(ceid)
            except UnknownExecutionError:
                continue
            if self.children.get(ceid) is not child.status:
                self.children[ceid] = child.status
                self.line("  ", f"child {child.workflow} {ceid} is ", (child.status.value, STATUS_STYLE[child.status]))


def waits_for_decision(eid: str, entries: list[Entry]) -> bool:
    """Whether the execution's last entry is a suspension that waits for the decision."""
    if not entries or entries[-1].kind is not EntryKind.EXECUTION_SUSPENDED:
        return False
    waits = (entries[-1].value or {}).get("waits") or []
    return any(w.get("kind") == "message" and w.get("channel") == f"{eid}.decision" for w in waits)


async def run_demo(engine: Engine, console: Console, *, url: str, timeout: float = 60.0) -> int:
    """Start an invoice approval, run it to its end with a worker in this process, approve it as
    a person when it waits for the decision, then print its journal. Returns an exit code."""
    invoice_id = f"INV-{secrets.randbelow(90_000) + 10_000}"
    console.print(Text.assemble(("flowli demo", "bold"), f": an invoice approval on {url}"))
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    # a queue of its own: the demo's worker takes no task of other applications on this
    # database, and their workers take none of the demo's
    async with engine.worker(concurrency=8, queues=[QUEUE]):
        eid = await engine.start("invoice_approval", invoice_id, 1250.0, by=REQUESTER, queue=QUEUE)
        progress = Progress(engine, eid, console)
        signalled = False
        with console.status(f"running execution {eid}…"):
            while True:
                record, entries = await progress.poll()
                if record.terminal:
                    break
                if not signalled and waits_for_decision(eid, entries):
                    payload = {"approved": True}
                    progress.line(("signal    ", "bold cyan"),
                                  f"{APPROVER} approves {invoice_id}: decision {json.dumps(payload)} sent to {eid}")
                    await engine.signal(eid, "decision", payload, by=APPROVER)
                    signalled = True
                if loop.time() > deadline:
                    console.print(Text(f"the demo execution {eid} is still {record.status.value} after {timeout:.0f} s",
                                       style="bold red"))
                    return 1
                await asyncio.sleep(0.05)
        children = [await engine.status(c) for c in child_eids(entries)]
    console.print()
    console.rule("journal")
    console.print(execution_view(record, entries, children))
    console.print()
    console.print(Text.assemble(
        "See it again with ", (f"flowli show {eid}", "bold"),
        *((" and the child's with ", (f"flowli show {children[0].eid}", "bold")) if children else ()),
        "; list the executions with ", ("flowli ls", "bold"), ".",
    ))
    return 0 if record.status is Status.COMPLETED else 1
