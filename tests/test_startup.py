"""What a process pays to start: a CLI call, a plain ``import flowli`` and ``flowli serve`` load
only what they use. The libraries below cost a process tens to hundreds of milliseconds of CPU to
import (the MCP SDK about half a second); each is imported where it is first needed instead, and
these tests fail when a module at the top of an import chain pulls one back in. (How long a start
takes is measured in ``bench/startup.py``, not here.)"""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

import httpx
import pytest

import flowli
from flowli.http import create_app

HEAVY = ("pydantic", "structlog", "uuid6", "croniter", "prometheus_client", "mcp", "fastapi", "uvicorn", "jinja2",
         "httpx", "flowli.pipelines", "flowli.http", "flowli.dashboard")
"""What neither ``import flowli`` nor a CLI call that needs none of it imports."""


def loaded_after(code: str) -> list[str]:
    """The modules of HEAVY that a fresh interpreter holds after running ``code``."""
    probe = f"{code}\nimport json, sys\nprint(json.dumps([m for m in {list(HEAVY)!r} if m in sys.modules]))"
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, check=True)
    loaded: list[str] = json.loads(done.stdout.strip().splitlines()[-1])
    return loaded


@pytest.mark.e2e
def test_import_flowli_and_the_cli_load_none_of_the_heavy_libraries() -> None:
    assert loaded_after("import flowli") == []
    assert loaded_after("import flowli.cli") == []
    # the command line parsed whole (every command's options), as every CLI call does
    assert loaded_after("import typer.main, flowli.cli\ntyper.main.get_command(flowli.cli.app)") == []


@pytest.mark.e2e
def test_what_uses_a_library_still_loads_it() -> None:
    # the probe can fail: each of these needs the library it names, and finds it
    assert "uuid6" in loaded_after("from flowli.domain import new_eid\nnew_eid()")
    assert "croniter" in loaded_after("from flowli.engine import trigger\ntrigger(cron='0 9 * * 1-5')")
    assert "structlog" in loaded_after("from flowli.log import get_logger\nget_logger('x')")


@pytest.mark.integration
async def test_mcp_is_built_at_its_first_request_and_closed_with_the_service(tmp_path: Any) -> None:
    engine = await flowli.connect(f"sqlite:///{tmp_path / 's.db'}", flowli.Registry())
    async with engine:
        service = create_app(engine)
        assert service.mcp.server is None  # nothing built before /mcp is asked for
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=service), base_url="http://127.0.0.1") as client:
            refused = await client.post("/mcp", json={"jsonrpc": "2.0", "id": 1, "method": "initialize"})
            assert refused.status_code == 401 and refused.headers["www-authenticate"].startswith("Bearer")
            assert service.mcp.server is not None  # built by that request: the gate in front refused it
            again = await client.post("/mcp", json={"jsonrpc": "2.0", "id": 2, "method": "initialize"})
            assert again.status_code == 401
        await service.mcp.close()
        await service.mcp.close()  # closing twice is closing once


LOOP_DURING_IMPORT = """
import asyncio, sys, tempfile, httpx, flowli
from flowli.http import create_app

async def main():
    ticks = 0

    async def tick():
        nonlocal ticks
        while True:
            await asyncio.sleep(0.005)
            ticks += 1

    with tempfile.TemporaryDirectory() as folder:
        engine = await flowli.connect(f"sqlite:///{folder}/s.db", flowli.Registry())
        async with engine:
            service = create_app(engine)
            ticker = asyncio.create_task(tick())
            await asyncio.sleep(0.05)
            assert "mcp" not in sys.modules
            before = ticks
            transport = httpx.ASGITransport(app=service)
            async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as client:
                answer = await client.post("/mcp", json={"jsonrpc": "2.0", "id": 1, "method": "initialize"})
            during = ticks - before
            ticker.cancel()
            await service.mcp.close()
            print(answer.status_code, during)

asyncio.run(main())
"""


@pytest.mark.e2e
def test_the_first_mcp_request_imports_the_sdk_while_the_event_loop_goes_on() -> None:
    # a fresh interpreter, where the MCP SDK is not imported yet: a task that ticks every 5 ms
    # keeps ticking while the first /mcp request waits for the SDK's import (about half a second;
    # on the event loop's thread it would tick a few times at most, during the build's awaits)
    done = subprocess.run([sys.executable, "-c", LOOP_DURING_IMPORT], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    status, during = done.stdout.split()
    assert status == "401"  # no key: the gate in front of the SDK refused it, once built
    assert int(during) >= 20, f"the event loop ran {during} ticks while /mcp was built"


@pytest.mark.e2e
def test_a_service_runs_the_approvals_of_assistants_writes_before_any_mcp_request() -> None:
    # an approval waits for a person across a restart: the service's engine must know its workflow
    # from the start, while the MCP SDK stays unimported until /mcp is asked for
    code = """
import asyncio, tempfile, flowli
from flowli.http import create_app
from flowli.mcp import APPROVAL

async def main():
    with tempfile.TemporaryDirectory() as folder:
        engine = await flowli.connect(f"sqlite:///{folder}/s.db", flowli.Registry())
        async with engine:
            create_app(engine)
            assert APPROVAL in engine.registry.names(), engine.registry.names()

asyncio.run(main())
"""
    assert "mcp" not in loaded_after(code) and "mcp" in HEAVY
