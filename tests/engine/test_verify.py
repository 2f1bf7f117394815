"""``engine.verify``: the journals of a live execution and of finished ones (one of them archived)
replayed in memory against changed code. Compatible changes (a step after the last memoized one,
a renamed local variable) pass; an inserted step, a changed argument, a removed step, a changed
child workflow and a workflow the new code lacks are each reported at the right frame; a live
execution that would break is "breaking"; nothing is written (every row the same before and
after)."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from flowli.domain import EntryKind

from .. import forked
from ..rows import dump
from . import verify_code
from .verify_code import code


async def at_receive(engine: Any, eid: str) -> None:
    for _ in range(500):
        if any(e.kind is EntryKind.FRAME_STARTED and (e.fid or "").startswith("root/receive")
               for e in await engine.journal(eid)):
            return
        await asyncio.sleep(0.02)
    raise AssertionError(f"{eid} never waited at its receive")


@pytest.mark.integration
async def test_verify_reports_each_change_at_its_frame_and_writes_nothing(open_engine, db_url):
    async with open_engine(code(), retention=timedelta(0)) as engine:
        live = await engine.start("order", 1)
        done = await engine.start("order", 2)
        archived = await engine.start("order", 3)
        await engine.signal(done, "go", True)
        await engine.signal(archived, "go", True)
        await engine.result(done, timeout=20)
        await engine.result(archived, timeout=20)
        await at_receive(engine, live)
    async with open_engine(code(), worker=False, retention=timedelta(0)) as engine:
        # fold the finished runs (and their children) into the archive
        assert await engine.retain() >= 2
        assert await engine.archived(archived) is not None
        await engine.list()  # the executions view caught up: what follows must write nothing
        before = await dump(db_url)

        same = await engine.verify(code())
        by_eid = {c.eid: c for c in same.checked}
        assert set(by_eid) >= {live, done, archived}
        assert by_eid[live].live and by_eid[archived].status == "completed"
        assert all(c.compatible for c in same.checked) and same.breaking == []
        for variant in ("renamed", "appended"):
            assert all(c.compatible for c in (await engine.verify(code(variant))).checked), variant

        inserted = await engine.verify(code("inserted"))
        first = {c.eid: c.difference for c in inserted.checked}
        assert first[live] is not None and first[live].fid == "root/audit#0", first[live]
        assert "before frame root/fetch#0" in first[live].detail
        assert [c.eid for c in inserted.breaking] == [live]
        assert first[archived] is not None  # the archive's journal, checked the same way

        argument = {c.eid: c.difference for c in (await engine.verify(code("argument"))).checked}
        changed = argument[live]
        assert changed is not None and changed.fid == "root/fetch#0", changed
        assert changed.recorded["args"] == [1] and changed.current["args"] == [2]
        assert changed.recorded["function"] == "tests.engine.verify_code:fetch"  # the step function
        # the call site of the frame in the new code: its file, line and function
        line = next(i for i, text in enumerate(Path(verify_code.__file__).read_text().splitlines(), 1)
                    if "n + 1 if variant" in text)
        assert changed.current["site"] == f"{verify_code.__file__}:{line} in order"
        assert changed.recorded["digest"] and "argument" in changed.detail

        removed = {c.eid: c.difference for c in (await engine.verify(code("removed"))).checked}
        assert removed[live] is not None and removed[live].fid == "root/fetch#0", removed[live]
        assert "never created" in removed[live].detail

        child = {c.eid: c.difference for c in (await engine.verify(code("child"))).checked}
        assert child[live] is not None and child[live].fid.startswith("root/child"), child[live]

        missing = await engine.verify(code("missing"))
        gone = {c.eid: c for c in missing.checked}
        assert gone[live].difference is not None and "cannot run it" in gone[live].difference.detail

        summary = {(r["workflow"], r["version"]): r for r in inserted.summary()}
        row = summary[("order", "1")]
        assert row["checked"] == row["compatible"] + row["incompatible"] and row["live_incompatible"] == 1
        assert row["pin"] == "1" and {d["eid"] for d in row["differences"]} >= {live}

        only = await engine.verify(code("inserted"), workflow="child.a", limit=1)
        assert {c.workflow for c in only.checked} == {"child.a"} and len(only.checked) == 1

        assert await dump(db_url) == before  # nothing written, row for row


@pytest.mark.e2e
async def test_flowli_verify_exits_1_when_a_live_execution_would_break(tmp_path):
    import subprocess

    import flowli

    url = f"sqlite:///{tmp_path / 'prod.db'}"
    engine = await flowli.connect(url, code(), poll_interval=0.05)
    async with engine, engine.worker():
        live = await engine.start("order", 1)
        await at_receive(engine, live)

    def verify(*args: str) -> subprocess.CompletedProcess[str]:
        return forked.run(["--db", url, "verify", *args])

    fine = verify("--app", "tests.engine.verify_code:appended")
    assert fine.returncode == 0, fine.stdout + fine.stderr
    assert "order" in fine.stdout and "incompatible" in fine.stdout
    broken = verify("--app", "tests.engine.verify_code:inserted")
    assert broken.returncode == 1, broken.stdout + broken.stderr
    assert f"{live} (suspended): root/audit#0" in broken.stdout
    assert "1 live execution(s) would break on this code" in broken.stderr
    as_json = verify("--app", "tests.engine.verify_code:inserted", "--json", "--workflow", "order")
    assert as_json.returncode == 1 and '"live_incompatible": 1' in as_json.stdout and '"pin": "1"' in as_json.stdout
    no_code = verify()
    assert no_code.returncode == 2 and "pass it as --app" in no_code.stderr
    missing = forked.run(["--db", f"sqlite:///{tmp_path / 'none.db'}", "verify", "--app", "tests.engine.verify_code:v1"])
    assert missing.returncode == 2 and "there is no database at" in missing.stderr
    assert not (tmp_path / "none.db").exists()
