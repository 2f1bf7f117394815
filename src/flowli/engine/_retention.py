"""Retention: fold each execution that finished more than ``Options.retention`` ago into one
archive object (its record, journal and scoped channels) in the bucket, then delete its live
state. ``engine.journal`` and ``engine.status`` read the archive when live state is gone.

The archive is written (and synced) before anything is deleted, so a crash between the two
leaves both, and the next pass deletes the live state. Evidence is not in the archive: it stays
in the bucket under its own folder.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from flowli.domain import TERMINAL, UnknownExecutionError
from flowli.store import Write

from ._archive import Archive, entry_json, message_json, record_json
from ._runtime import SWEEPER, Runtime
from ._transitions import Transition, commit

log = logging.getLogger("flowli.retention")
_BATCH = 200


async def fold(rt: Runtime, eid: str, archive: Archive) -> bool:
    """Archive one finished execution and delete its live state; False if it is not finished."""
    record = await rt.store.read_execution(eid)
    if record is None or not record.terminal:
        return False
    journal = await rt.store.read_journal(eid)
    messages = await rt.store.read_scoped_messages(eid)
    channels: dict[str, list[dict[str, Any]]] = {}
    for m in messages:
        channels.setdefault(m.channel, []).append(message_json(m))
    obj = {
        "format": 1,
        "archived_at": rt.clock.now().isoformat(),
        "record": record_json(record),
        "journal": [entry_json(e) for e in journal],
        "channels": channels,
    }
    state = await rt.store.read_state(eid)
    if state is not None:  # a decider's: its state and version go with its journal
        obj["decider_state"] = {"version": state[0], "state": state[1]}
    if await rt.store.read_execution(eid) is None:
        # another pass (this process's sweeper, another process) folded it while this one read:
        # what this one read after that delete is missing (an empty journal), and its archive
        # must not replace the other's. Read while the execution still stood, all of it was there
        # (the delete is one transaction), and an archive of it is the same as the other's.
        return False
    await asyncio.to_thread(archive.write, eid, obj)
    write = Write(expect=(eid, TERMINAL), delete_executions=[eid])
    try:
        await commit(rt, Transition("fold", write, eid, record.workflow, SWEEPER, record.application))
    except UnknownExecutionError:
        return False  # another pass (this process's sweeper, another process) folded it meanwhile
    return True


async def retain(rt: Runtime, archive: Archive) -> int:
    """One pass: fold every execution finished before now minus the retention delay."""
    before = rt.clock.now() - rt.options.retention
    await rt.announcer.drain()  # the control-log appends of this process first (an execution with one pending waits)
    folded = 0
    while True:
        eids = await rt.store.finished_before(before, _BATCH)
        if not eids:
            return folded
        for eid in eids:
            try:
                if await fold(rt, eid, archive):
                    folded += 1
            except OSError as exc:  # the bucket is not writable: keep the live state
                log.error("cannot archive %s: %s", eid, exc)
                return folded
