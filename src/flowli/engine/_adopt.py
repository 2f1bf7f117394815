"""Handing an execution of a Python workflow to a decider of the same name (``engine.adopt``):
an upgrade that retires a workflow without waiting for its runs to end. The caller folds the
workflow's journal into the decider's state (the workflow's code is not needed, nor run); the
engine writes, in one write, what makes the execution the decider's:

- its record's version (the decider's), and the state at version 1 with its index;
- an ``execution.migrated`` entry with that state, so its journal says where the workflow's part
  ends and what the decider's events fold from (``engine.verify`` folds from it);
- for one not ended: the workflow's open work withdrawn (its DELEGATE tasks, so that a late
  answer is stale; its RESUME tasks; its timers; its waits on channels), and the command
  ``Adopted`` decided on the state, whose effects say what runs again (the attempts that were
  open, as the decider's Delegates with their next attempt numbers); or, when a cancel was
  requested that the workflow had not taken yet, the command CancelRequested.

The write is guarded as an operator's is: the journal must still end where the caller read it,
and no live worker may hold the execution's lease, so a fold never misses an entry; the state's
compare-and-set (from no state) makes a second adoption, or a concurrent one, change nothing."""

from __future__ import annotations

import dataclasses
from typing import Any

from flowli.domain import (
    TERMINAL,
    Code,
    Entry,
    EntryKind,
    OperationRefused,
    StaleState,
    Status,
    TaskKind,
    UnknownExecutionError,
    check_json,
    principal_for,
)
from flowli.store import Advance, Guard, StatusChange, Withdrawal, Write

from . import _deciding as deciding
from ._decider import ROOT, Adopted
from ._operations import ENGINE_ACTOR
from ._runtime import Runtime
from ._transitions import Transition, commit


async def adopt(rt: Runtime, eid: str, version: str, state: Any, last_seq: int, by: Any) -> bool:
    """Make ``eid`` an execution of the decider of version ``version`` of its workflow's name,
    from ``state`` (folded by the caller from the journal up to seq ``last_seq``). True when this
    call adopted it; False when it is the decider's already. Raises OperationRefused when the
    journal moved on since ``last_seq`` or a live worker holds its lease (fold it again, later),
    or when there is no such decider."""
    record = await rt.store.read_execution(eid)
    if record is None:
        raise UnknownExecutionError(eid)
    if record.version == version:
        return False
    decider = rt.registry.decider_of(record.workflow, version)
    if decider is None:
        raise OperationRefused(eid, "adopt", f"no decider {record.workflow!r} of version {version!r} is registered")
    state = check_json(state, f"the state of decider {decider.name!r}")
    principal = principal_for(by, ENGINE_ACTOR, None)
    prov = rt.provenance(actor=principal.actor, code=Code(decider.name, decider.version, "decider", "Adopted",
                                                          decider.ref))
    migrated = Entry(eid=eid, kind=EntryKind.EXECUTION_MIGRATED, provenance=prov, fid=ROOT,
                     value={"from": record.version, "to": version, "decider": True, "state": state})
    adopted = dataclasses.replace(record, version=version)
    write = Write(guard=Guard(eid, last_seq, "adopt"), entries=[migrated])
    if record.terminal:
        # ended: its state for reads, nothing to run; the instant it ended stays its own
        write.expect = (eid, frozenset({record.status}))
        write.status = StatusChange(eid, record.status, result=record.result, error=record.error,
                                    blocked=record.blocked, version=version, touch=False)
        write.advance = Advance(eid, 1, state, deciding.state_index(decider, adopted, state))
    else:
        write.expect = (eid, frozenset(Status) - TERMINAL)
        open_tasks = await rt.store.read_tasks(None, eid, False)
        # a cancel the workflow was asked for and had not taken yet is the decider's to take
        command = deciding.cancel_command(record.cancel_requested) if record.cancel_requested is not None \
            else Adopted(record.version)
        deciding.decide(rt, decider, adopted, state, 0, command, principal.actor, write)
        # the workflow's own tasks go (its DELEGATE attempts, before the decider's are inserted;
        # its RESUME tasks, which no worker could run now), with its timers and waits
        write.withdrawals += [Withdrawal(t.id) for t in open_tasks if t.kind is not TaskKind.DELEGATE]
        write.withdraw_delegates = [eid]
        write.clear_timers = [eid]
        write.clear_waiters = [eid]
        status = write.status or StatusChange(eid, record.status)
        write.status = dataclasses.replace(status, version=version)
    try:
        await commit(rt, Transition("migrate", write, eid, record.workflow, principal, record.application,
                                    {"from": record.version, "to": version, "adopt": True}))
    except StaleState:
        return False  # adopted meanwhile (its state exists)
    return True
