"""Several processes opening one new SQLite database at the same moment (a worker and a CLI
command started together): each opens it and starts an execution. Switching a new file to WAL
takes an exclusive lock that SQLite does not wait for, so an unguarded switch failed with
"database is locked". The store's file and the projection's are both opened so: the projection
(``flowli.db-projection``, opened by every engine after its store) first on its own here, all
processes at once, since behind the store's open they would seldom meet there."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.e2e

OPENER = textwrap.dedent('''
    import asyncio, sys, time
    from pathlib import Path
    import flowli
    from flowli import Context, Registry
    from flowli.store import connect_wal

    registry = Registry()

    @registry.workflow("noop")
    async def noop(ctx: Context) -> int:
        return 1

    async def main(folder: Path, name: str) -> None:
        (folder / f"{name}.ready").write_text("")
        while not (folder / "go").exists():  # all of them open at once
            time.sleep(0.001)
        connect_wal(str(folder / "flowli.db-projection"), synchronous="OFF").close()  # as the projection opens it
        engine = await flowli.connect(f"sqlite:///{folder / 'flowli.db'}", registry)
        async with engine:
            eid = await engine.start("noop")
            await engine.list()  # the projection's tables, made by all of them at once
            print(eid)

    asyncio.run(main(Path(sys.argv[1]), sys.argv[2]))
''')


def test_processes_that_open_one_new_database_together_all_open_it(tmp_path: Path) -> None:
    script = tmp_path / "opener.py"
    script.write_text(OPENER)
    for round_ in range(6):
        folder = tmp_path / f"round{round_}"
        folder.mkdir()
        procs = [
            subprocess.Popen([sys.executable, str(script), str(folder), f"p{i}"], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
            for i in range(3)
        ]
        deadline = time.monotonic() + 60
        while not all((folder / f"p{i}.ready").exists() for i in range(3)):
            assert time.monotonic() < deadline, "the openers did not get ready"
            assert all(p.poll() is None for p in procs), [p.communicate() for p in procs]
            time.sleep(0.01)
        (folder / "go").write_text("")
        outcomes = [(p.wait(timeout=60), *p.communicate()) for p in procs]
        failed = [(code, err.strip().splitlines()[-1:]) for code, _, err in outcomes if code != 0]
        assert failed == [], f"round {round_}: {failed}"
        assert len({out.strip() for _, out, _ in outcomes}) == 3  # three executions started
