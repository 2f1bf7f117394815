"""The MCP server, driven by the official SDK's own client: over stdio (``flowli mcp``) and over
streamable HTTP (``/mcp`` on a real ``flowli serve``). The reference's discovery sequence, start
and watch, a failed run diagnosed through the prompt's sequence and retried, a remediation gate,
a composition validated then saved and run, RBAC and a second application's runs."""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx2
import pytest
from mcp import Client, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError

import flowli
from flowli import Registry

from ..catalog.app import fix
from ..catalog.test_compositions import error_example, vw_demo
from ..crash import until
from ..served import Names, Service, application, log_checked
from ..served import flowli as run_cli

pytestmark = pytest.mark.e2e

APP = "tests.catalog.app:registry"
TOOLS = {"list_workflow_namespaces", "list_workflow_types", "get_workflow_schema", "get_workflow_prerequisites",
         "get_workflow_definition", "get_workflow_dag", "start_workflow", "get_workflow_status", "watch_workflow",
         "get_workflow_history", "list_workflows", "retry_workflow", "resolve_workflow", "list_stuck_workflows",
         "force_terminate_workflow", "validate_composition", "save_composition", "list_compositions", "send_signal",
         "cancel_workflow"}


async def call(client: Client, tool: str, **arguments: Any) -> dict[str, Any]:
    result = await client.call_tool(tool, arguments)
    assert not result.is_error, result.content
    assert result.content and result.content[0].text  # a short text for the assistant too
    return dict(result.structured_content or {})


async def refused(client: Client, tool: str, **arguments: Any) -> str:
    result = await client.call_tool(tool, arguments)
    assert result.is_error, result.structured_content
    text = result.content[0].text
    assert "Traceback" not in text
    return str(text)


def refusal_of(exc: BaseException) -> str:
    """The message of the MCP error the SDK's client raised (inside its task groups' groups)."""
    while isinstance(exc, BaseExceptionGroup):
        assert len(exc.exceptions) == 1, exc
        exc = exc.exceptions[0]
    assert isinstance(exc, MCPError), repr(exc)
    return exc.error.message


@pytest.fixture
def effects_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "effects"
    monkeypatch.setenv("FLOWLI_TEST_EFFECTS", str(path))
    return path



async def clerk_signs(db: str, bucket: Path, pause: float = 0.0, application: str | None = None) -> None:
    """A clerk of another engine on ``db`` takes the clerks' task (of ``application``'s runs, when
    given) and answers it signed (after ``pause`` seconds: a watch is waiting by then)."""
    engine = await flowli.connect(db, Registry(), bucket=str(bucket))
    async with engine:
        bot = engine.consumer("clerks", "clerk", application=application)
        [task] = await until(lambda: bot.dequeue(), 30, "the clerk's task")
        await asyncio.sleep(pause)
        await bot.answer(task, {"signed": True}, by="carol@example.com")

async def test_the_discovery_sequence_and_a_run_over_stdio(tmp_path, effects_env):
    params = StdioServerParameters(command=sys.executable, args=[
        "-m", "flowli.cli", "--db", f"sqlite:///{tmp_path / 'm.db'}", "--app", APP, "mcp"],
        env={**os.environ}, cwd=os.getcwd())
    async with Client(params) as client:
        tools = {t.name: t for t in (await client.list_tools()).tools}
        assert set(tools) >= TOOLS
        assert tools["get_workflow_status"].annotations.read_only_hint is True
        assert tools["force_terminate_workflow"].annotations.destructive_hint is True
        assert tools["start_workflow"].annotations.read_only_hint is False
        assert "workflow_type" in tools["get_workflow_schema"].input_schema["properties"]
        # the reference's discovery sequence
        spaces = (await call(client, "list_workflow_namespaces"))["namespaces"]
        assert {"namespace": "aws.s3", "types": 6} in spaces
        s3 = (await call(client, "list_workflow_types", prefix="aws.s3."))["types"]
        assert "aws.s3.create_bucket" in [t["name"] for t in s3]
        schema = await call(client, "get_workflow_schema", workflow_type="aws.s3.create_bucket")
        assert schema["has_prerequisites"] is True and schema["read_only"] is False
        pre = await call(client, "get_workflow_prerequisites", workflow_type="aws.s3.create_bucket", variant="aws")
        assert pre["prerequisites"][0]["title"] == "An AWS connection"
        started = await call(client, "start_workflow", workflow_type="aws.s3.create_bucket",
                             inputs={"bucket": "mcp-1"})
        assert started["status"] == "PENDING"
        progress: list[Any] = []

        async def on_progress(done: float, total: float | None, message: str | None) -> None:
            progress.append(message)

        watched = await client.call_tool("watch_workflow", {"workflow_id": started["workflow_id"]},
                                         progress_callback=on_progress)
        assert watched.structured_content["status"] == "COMPLETED"
        assert watched.structured_content["output"] == {"bucket_name": "mcp-1", "arn": "arn:aws:s3:::mcp-1"}
        unknown = await refused(client, "start_workflow", workflow_type="aws.s3.create_buckt", inputs={})
        assert "unknown workflow type 'aws.s3.create_buckt'; did you mean 'aws.s3.create_bucket'?" in unknown
        bad = await refused(client, "start_workflow", workflow_type="aws.s3.enable_versioning", inputs={"count": "x"})
        assert "bucket is required" in bad
        # the prompt and the resources
        prompt = await client.get_prompt("diagnose_workflow_run", {"workflow_id": started["workflow_id"]})
        text = prompt.messages[0].content.text
        assert f'get_workflow_history("{started["workflow_id"]}", include_state_data=True)' in text
        dag = await client.read_resource("concept://dag")
        assert "remediation_pending" in dag.contents[0].text
        rules = await client.read_resource("knowledge://mcp/execution")
        assert "Never invent a type name" in rules.contents[0].text
        one = await client.read_resource("catalog://types/aws.s3.create_bucket")
        assert '"workflow_kind": "state_machine"' in one.contents[0].text


@pytest.fixture
async def served(service: Service, names: Names) -> AsyncIterator[Any]:
    """The shared server, an application of this test (its name is ``acme-…``) with an admin and
    a viewer key, and another application's key; the test writes no traceback to the log."""
    acme = names("acme")
    _, admin, (viewer,) = await service.application(acme, ("viewer", "watcher"))
    _, other, _ = await service.application(names("globex"))
    with log_checked(service):
        yield service, {"admin": admin, "viewer": viewer, "other": other}, acme


@contextlib.asynccontextmanager
async def over_http(url: str, key: str, header: str = "bearer") -> AsyncIterator[Client]:
    headers = {"Authorization": f"Bearer {key}"} if header == "bearer" else {"X-API-Key": key}
    async with httpx2.AsyncClient(headers=headers, timeout=60) as http:
        async with Client(streamable_http_client(f"{url}/mcp", http_client=http)) as client:
            yield client


async def test_the_loop_over_streamable_http(served, names):
    svc, keys, _ = served
    up, locked = names("up"), names("locked-m")
    async with over_http(svc.url, keys["admin"]) as client:
        # a failed run diagnosed through the prompt's sequence, then retried
        wid = (await call(client, "start_workflow", workflow_type="ops.flaky", inputs={"name": up}))["workflow_id"]
        failed = await call(client, "watch_workflow", workflow_id=wid, timeout_seconds=60)
        assert failed["status"] == "FAILED" and failed["reason"]["step"] == "flaky"
        assert failed["reason"]["message"] == f"{up} is down"
        history = (await call(client, "get_workflow_history", workflow_id=wid, include_state_data=True))["history"]
        assert any(h.get("error", {}).get("message") == f"{up} is down" for h in history)
        first = await call(client, "get_workflow_history", workflow_id=wid, limit=2)
        assert [h["seq"] for h in first["history"]] == [history[0]["seq"], history[1]["seq"]]
        rest = await call(client, "get_workflow_history", workflow_id=wid, after_seq=first["next_after_seq"], limit=500)
        assert first["history"] + rest["history"] == [{k: v for k, v in h.items() if k not in ("input", "output",
                                                      "error", "state_data")} for h in history]
        assert rest["next_after_seq"] is None
        fix(up)
        assert (await call(client, "retry_workflow", workflow_id=wid))["status"] == "PENDING"
        done = await call(client, "watch_workflow", workflow_id=wid, timeout_seconds=60)
        assert done["status"] == "COMPLETED" and done["output"] == {"name": up, "ok": True}
        # a composition validated (not saved), then saved and run; a remediation gate resolved
        broken = vw_demo()
        broken["layers"][1]["steps"][0]["workflow_type"] = "aws.s3.put_bucket_taging"
        assert await call(client, "validate_composition", definition=broken) == error_example()
        assert await call(client, "validate_composition", definition=vw_demo()) == {"errors": [], "warnings": []}
        assert (await call(client, "list_compositions"))["compositions"] == []
        saved = await call(client, "save_composition", definition=vw_demo())
        assert saved["workflow_type"] == "virtual.vw_demo@1.0"
        types = [t["name"] for t in (await call(client, "list_workflow_types", prefix="virtual."))["types"]]
        assert types == []  # saved compositions are not listed as types
        run = await call(client, "start_workflow", workflow_type="virtual.vw_demo@1.0",
                         inputs={"bucket_name": locked})
        parked = await call(client, "watch_workflow", workflow_id=run["workflow_id"], timeout_seconds=60)
        assert parked["status"] == "remediation_pending"
        assert parked["state_data"]["remediation"]["fix"] == {"action": "release_hold", "bucket": locked}
        fix(locked)
        await call(client, "resolve_workflow", workflow_id=run["workflow_id"], resolution="remediated")
        finished = await call(client, "watch_workflow", workflow_id=run["workflow_id"], timeout_seconds=60)
        assert finished["status"] == "COMPLETED" and finished["output"] == {"s2": {"bucket": locked, "tags": 1}}
        listed = await call(client, "list_workflows", workflow_type="virtual.vw_demo@1.0")
        assert [r["workflow_id"] for r in listed["runs"]] == [run["workflow_id"]]
    async with over_http(svc.url, keys["viewer"], header="x-api-key") as client:
        assert (await call(client, "get_workflow_status", workflow_id=wid))["status"] == "COMPLETED"
        denied = await refused(client, "retry_workflow", workflow_id=wid)
        assert "lacks the capability 'runs:operate'" in denied
        denied = await refused(client, "start_workflow", workflow_type="aws.s3.create_bucket", inputs={"bucket": "v"})
        assert "lacks the capability 'runs:start'" in denied
        # a viewer may start a data type: a read
        data = await call(client, "start_workflow", workflow_type="aws.s3.list_buckets", inputs={})
        assert (await call(client, "watch_workflow", workflow_id=data["workflow_id"]))["status"] == "COMPLETED"
    async with over_http(svc.url, keys["other"]) as client:
        assert "unknown execution" in await refused(client, "get_workflow_status", workflow_id=wid)
        assert (await call(client, "list_workflows"))["runs"] == []
        assert (await call(client, "list_compositions"))["compositions"] == []
    with pytest.raises(Exception) as no_session:  # an unknown key opens no session (401 before it)
        async with over_http(svc.url, "flk_not-a-key") as client:
            await client.list_tools()
    assert refusal_of(no_session.value) == "the API key is unknown or disabled"


async def test_writes_wait_for_a_persons_approval_when_the_application_requires_it(served):
    svc, keys, acme = served
    done = run_cli(svc.db, "apps", "set", acme, "--mcp-approval", "required")
    assert done.returncode == 0 and "mcp approval required" in done.stdout, done.stderr
    bad = run_cli(svc.db, "apps", "set", acme, "--mcp-approval", "sometimes")
    assert bad.returncode == 2 and "mcpApproval must be one of required, none" in bad.stderr
    async with over_http(svc.url, keys["admin"]) as client:
        asked = await call(client, "start_workflow", workflow_type="aws.s3.create_bucket", inputs={"bucket": "ok-1"})
        assert asked["status"] == "approval_required"
        assert asked["summary"] == "start_workflow aws.s3.create_bucket"
        approval = asked["approval_id"]
        assert (await call(client, "get_approval", approval_id=approval))["status"] == "pending"
        assert (await call(client, "list_workflows", workflow_type="aws.s3.create_bucket"))["runs"] == []
        # reads need no approval
        assert (await call(client, "list_workflow_types", prefix="aws.s3."))["types"]

        async def in_inbox() -> bool:  # (a narrow table folds the eid: its first part is on one line)
            return approval[:13] in run_cli(svc.db, "inbox").stdout

        await until(in_inbox, 30, "the approval in the review inbox")
        assert run_cli(svc.db, "approvals", "approve", approval).returncode == 2  # who decides is required
        yes = run_cli(svc.db, "approvals", "approve", approval, "--by", "carol@example.com")
        assert yes.returncode == 0, yes.stderr

        async def decided() -> Any:
            state = await call(client, "get_approval", approval_id=approval)
            return state if state["status"] != "pending" else None

        state = await until(decided, 30, "the approved write")
        assert state["status"] == "approved" and state["by"] == "carol@example.com"
        wid = state["result"]["workflow_id"]
        run = await call(client, "watch_workflow", workflow_id=wid, timeout_seconds=60)
        assert run["status"] == "COMPLETED" and run["output"]["bucket_name"] == "ok-1"
        # a rejected write is not carried out
        asked = await call(client, "start_workflow", workflow_type="aws.s3.create_bucket", inputs={"bucket": "no-1"})
        await until(lambda: asked["approval_id"][:13] in run_cli(svc.db, "inbox").stdout, 30, "the second approval")
        no = run_cli(svc.db, "approvals", "reject", asked["approval_id"], "--by", "carol@example.com",
                    "--reason", "not this quarter")
        assert no.returncode == 0, no.stderr

        async def rejected() -> Any:
            s = await call(client, "get_approval", approval_id=asked["approval_id"])
            return s if s["status"] != "pending" else None

        assert (await until(rejected, 30, "the rejection")) ["reason"] == "not this quarter"
        created = [r["workflow_id"] for r in (await call(client, "list_workflows",
                                                         workflow_type="aws.s3.create_bucket"))["runs"]]
        assert created == [wid]
    async with over_http(svc.url, keys["other"]) as client:  # another application's approval is unknown
        assert "unknown execution" in await refused(client, "get_approval", approval_id=approval)


async def test_stdio_with_an_api_key_acts_as_that_key(tmp_path, effects_env):
    db = f"sqlite:///{tmp_path / 'k.db'}"
    _, admin, (viewer,) = await application(db, "acme", ("viewer", "watcher"))

    def server(key: str) -> StdioServerParameters:
        return StdioServerParameters(command=sys.executable, args=[
            "-m", "flowli.cli", "--db", db, "--app", APP, "mcp", "--api-key", key], env={**os.environ}, cwd=os.getcwd())

    async with Client(server(viewer)) as client:
        denied = await refused(client, "start_workflow", workflow_type="ops.await_clerk", inputs={"note": "x"})
        assert "watcher" in denied and "lacks the capability 'runs:start'" in denied
    async with Client(server(admin)) as client:
        wid = (await call(client, "start_workflow", workflow_type="ops.await_clerk", inputs={"note": "x"}))["workflow_id"]
        progress: list[str] = []

        async def on_progress(done: float, total: float | None, message: str | None) -> None:
            progress.append(message or "")

        waited = await client.call_tool("watch_workflow", {"workflow_id": wid, "timeout_seconds": 2})
        state = waited.structured_content
        assert state["status"] == "PENDING" and state["timed_out"] is True  # it waits for a clerk

        # a clerk answers from another process while the watch waits (a second after taking the
        # task: the watch has begun by then, as in the loop's test over HTTP)
        answering = asyncio.create_task(clerk_signs(db, tmp_path / "bucket", pause=1.0))
        watched = await client.call_tool("watch_workflow", {"workflow_id": wid, "timeout_seconds": 60},
                                         progress_callback=on_progress)
        await answering
        assert watched.structured_content["status"] == "COMPLETED"
        assert watched.structured_content["output"] == {"signed": True}
        assert progress and progress[0].startswith("frame.completed"), progress  # progress while it waited
    # the run belongs to the key's application: a local admin session of no application sees it too,
    # a key of another application does not
    _, other, _ = await application(db, "globex")
    async with Client(server(other)) as client:
        assert "unknown execution" in await refused(client, "get_workflow_status", workflow_id=wid)
    bad = run_cli(db, "--app", APP, "mcp", "--api-key", "flk_nope")
    assert bad.returncode == 2 and "--api-key: the API key is unknown or disabled" in bad.stderr
