"""The assistant's loop over MCP, beyond ``test_mcp``: the discovery sequence over streamable
HTTP with real values, the annotations of every tool, a failed dag diagnosed through the
prompt's sequence over stdio and retried, a remediation gate denied, bad arguments refused in one
sentence, the short text of a start, paging with cursors, the ``catalog://types/{name}``
resource, reads and refusals under write approval, and a guarded force-terminate. Real
``flowli serve`` / ``flowli mcp`` processes, driven by the SDK's own client."""

from __future__ import annotations

import contextlib
import json
import os
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx2
import pytest
from mcp import Client, StdioServerParameters
from mcp.shared.exceptions import MCPError
from mcp.types import CallToolResult, TextContent, TextResourceContents

from ..catalog.app import effects, fix
from ..catalog.test_remediation import gated
from ..crash import until
from ..served import flowli, rows
from .test_mcp import APP, call, clerk_signs, over_http, refusal_of
from .test_mcp import effects_env as effects_env  # noqa: F401 - a fixture
from .test_mcp import served as served  # noqa: F401 - a fixture (both backends)

pytestmark = pytest.mark.e2e

READS = {"list_workflow_namespaces", "list_workflow_types", "get_workflow_schema", "get_workflow_prerequisites",
         "get_workflow_definition", "get_workflow_dag", "get_workflow_status", "watch_workflow",
         "get_workflow_history", "list_workflows", "list_stuck_workflows", "validate_composition",
         "list_compositions", "get_approval"}
DESTRUCTIVE = {"retry_workflow", "resolve_workflow", "force_terminate_workflow"}
WRITES = {"start_workflow", "save_composition"}


@contextlib.asynccontextmanager
async def over_stdio(tmp_path: Path) -> AsyncIterator[Client]:
    """``flowli mcp`` on a fresh SQLite file: a local admin session."""
    params = StdioServerParameters(command=sys.executable, args=[
        "-m", "flowli.cli", "--db", f"sqlite:///{tmp_path / 'm.db'}", "--app", APP, "mcp"],
        env={**os.environ}, cwd=os.getcwd())
    async with Client(params) as client:
        yield client


def text_of(block: Any) -> str:
    """The text of a content block (a tool's, a prompt's or a resource's): text, not another kind."""
    assert isinstance(block, (TextContent, TextResourceContents)), block
    return block.text


def error_text(result: CallToolResult) -> str:
    """The text of an error result: one sentence, no traceback, no validator's report."""
    assert result.is_error, result.structured_content
    assert result.content, "an error result with no text"
    text = text_of(result.content[0])
    assert "\n" not in text, text
    assert "Traceback" not in text and "pydantic.dev" not in text, text
    return text


async def watch(client: Client, wid: str, timeout: float = 60) -> dict[str, Any]:
    return await call(client, "watch_workflow", workflow_id=wid, timeout_seconds=timeout)


# ---- 1. discovery over streamable HTTP ------------------------------------------------------


async def test_the_discovery_sequence_over_streamable_http(served: Any) -> None:
    svc, keys, _ = served
    async with over_http(svc.url, keys["admin"]) as client:
        spaces = (await call(client, "list_workflow_namespaces"))["namespaces"]
        assert {"namespace": "aws.s3", "types": 6} in spaces
        assert {"namespace": "ops", "types": 5} in spaces  # the catalog's test types, the expense review, a message
        ops = (await call(client, "list_workflow_types", prefix="ops."))["types"]
        assert {t["name"] for t in ops} == {"ops.slow_touch", "ops.flaky", "ops.await_clerk", "ops.expense", "ops.await_message"}
        assert {t["namespace"] for t in ops} == {"ops"}
        s3 = (await call(client, "list_workflow_types", prefix="aws.s3."))["types"]
        [create] = [t for t in s3 if t["name"] == "aws.s3.create_bucket"]
        assert create["workflow_kind"] == "state_machine" and create["featured"] is True
        assert create["scope"] == "library" and create["description"] == "Create an S3 bucket."
        [data] = [t for t in s3 if t["name"] == "aws.s3.list_buckets"]
        assert data["workflow_kind"] == "data"

        schema = await call(client, "get_workflow_schema", workflow_type="aws.s3.create_bucket")
        assert schema["workflow_kind"] == "state_machine"
        assert schema["read_only"] is False and schema["has_prerequisites"] is True
        assert schema["input_schema"]["required"] == ["bucket"]
        assert set(schema["input_schema"]["properties"]) == {"bucket"}
        assert set(schema["output_schema"]["properties"]) == {"bucket_name", "arn"}
        assert [f["name"] for f in schema["fields"]] == ["bucket"]
        data_schema = await call(client, "get_workflow_schema", workflow_type="aws.s3.list_buckets")
        assert data_schema["read_only"] is True and data_schema["has_prerequisites"] is False

        pre = await call(client, "get_workflow_prerequisites", workflow_type="aws.s3.create_bucket", variant="aws")
        assert pre["workflow_type"] == "aws.s3.create_bucket"
        [one] = pre["prerequisites"]
        assert one["variant"] == "aws" and one["title"] == "An AWS connection"
        assert one["guide"] == "Create a connection, then pass its uuid."
        none = await call(client, "get_workflow_prerequisites", workflow_type="ops.flaky")
        assert none["prerequisites"] == []

        definition = await call(client, "get_workflow_definition", workflow_type="aws.s3.create_bucket")
        assert definition["workflow_type"] == "aws.s3.create_bucket"
        assert definition["permissions"] == ["s3:write"]
        assert definition["compensate"] == "aws.s3.delete_bucket"
        assert [p["variant"] for p in definition["prerequisites"]] == ["aws"]
        assert definition["input_schema"] == schema["input_schema"]

        dag = await call(client, "get_workflow_dag", workflow_type="aws.s3.create_bucket")
        [layer] = dag["layers"]
        [step] = layer["steps"]
        assert step["workflow_type"] == "aws.s3.create_bucket"
        data_dag = await call(client, "get_workflow_dag", workflow_type="aws.s3.list_buckets")
        assert [[s["workflow_type"] for s in la["steps"]] for la in data_dag["layers"]] == [["aws.s3.list_buckets"]]


# ---- 2. every tool with its annotations -----------------------------------------------------


async def test_every_tool_of_the_contract_is_listed_with_its_annotations(tmp_path: Path, effects_env: Path) -> None:
    async with over_stdio(tmp_path) as client:
        tools = {t.name: t for t in (await client.list_tools()).tools}
        assert set(tools) >= READS | DESTRUCTIVE | WRITES, sorted((READS | DESTRUCTIVE | WRITES) - set(tools))
        hints = {name: tool.annotations for name, tool in tools.items()}
        for name in READS:
            hint = hints[name]
            assert hint is not None and hint.read_only_hint is True, (name, hint)
        for name in DESTRUCTIVE:
            hint = hints[name]
            assert hint is not None and hint.destructive_hint is True, (name, hint)
            assert hint.read_only_hint is not True, (name, hint)
        for name in WRITES:
            hint = hints[name]
            assert hint is not None and hint.read_only_hint is False, (name, hint)


# ---- 3. a failed run diagnosed over stdio through the prompt's sequence ---------------------


def mend() -> dict[str, Any]:
    """Create a bucket, then probe an upstream that is down until it is fixed."""
    return {"name": "mend", "version": "1", "layers": [
        {"name": "make", "steps": [
            {"name": "create", "workflow_type": "aws.s3.create_bucket",
             "input_mapping": {"bucket": {"source": "input", "field": "bucket"}}}]},
        {"name": "check", "steps": [
            {"name": "probe", "workflow_type": "ops.flaky",
             "input_mapping": {"name": {"source": "input", "field": "upstream"}}}]}]}


async def test_a_failed_run_diagnosed_through_the_prompt_over_stdio(tmp_path: Path, effects_env: Path) -> None:
    async with over_stdio(tmp_path) as client:
        saved = await call(client, "save_composition", definition=mend())
        assert saved["workflow_type"] == "virtual.mend@1"
        wid = (await call(client, "start_workflow", workflow_type="virtual.mend@1",
                          inputs={"bucket": "diag-1", "upstream": "feed"}))["workflow_id"]
        assert (await watch(client, wid))["status"] == "FAILED"

        prompt = await client.get_prompt("diagnose_workflow_run", {"workflow_id": wid})
        text = text_of(prompt.messages[0].content)
        assert f'get_workflow_status("{wid}")' in text
        assert f'get_workflow_history("{wid}", include_state_data=True)' in text
        assert f'retry_workflow("{wid}")' in text

        status = await call(client, "get_workflow_status", workflow_id=wid)
        assert status["workflow_id"] == wid and status["workflow_type"] == "virtual.mend@1"
        assert status["status"] == "FAILED"
        reason = status["reason"]
        assert reason["step"] == "probe"
        assert isinstance(reason["code"], str) and reason["code"]
        assert "feed is down" in reason["message"]
        assert {s["name"]: s["status"] for s in status["steps"]}["create"] == "COMPLETED"

        history = (await call(client, "get_workflow_history", workflow_id=wid, include_state_data=True))["history"]
        failing = [h for h in history if h.get("error") and "feed is down" in json.dumps(h["error"])]
        assert failing, history
        assert history[-1]["state"] == "FAILED"
        bare = (await call(client, "get_workflow_history", workflow_id=wid))["history"]
        assert [h for h in bare if "error" in h] == []  # payloads only when asked

        fix("feed")
        retried = await call(client, "retry_workflow", workflow_id=wid)
        assert retried["workflow_id"] == wid and retried["status"] == "PENDING" and retried["step"] == "probe"
        done = await watch(client, wid)
        assert done["status"] == "COMPLETED", done
        assert done["output"] == {"probe": {"name": "feed", "ok": True}}
        # the failed step ran again; the completed one did not
        assert effects() == ["create:diag-1", "flaky:feed", "flaky:feed"]
        events = [h["event"] for h in (await call(client, "get_workflow_history", workflow_id=wid))["history"]]
        assert "execution.retried" in events


# ---- 4. a remediation gate denied -----------------------------------------------------------


async def test_a_remediation_gate_denied_over_mcp_compensates_and_fails(served: Any, names: Any) -> None:
    svc, keys, _ = served
    locked = names("locked-d")
    async with over_http(svc.url, keys["admin"]) as client:
        assert (await call(client, "save_composition", definition=gated()))["workflow_type"] == "virtual.gated@1"
        wid = (await call(client, "start_workflow", workflow_type="virtual.gated@1",
                          inputs={"bucket": locked}))["workflow_id"]
        parked = await watch(client, wid)
        assert parked["status"] == "remediation_pending"
        assert parked["state_data"]["remediation"]["step"] == "tag"
        resolved = await call(client, "resolve_workflow", workflow_id=wid, resolution="denied")
        assert resolved == {"workflow_id": wid, "status": "PENDING", "resolution": "denied", "step": "tag"}
        failed = await watch(client, wid)
        assert failed["status"] == "FAILED", failed
        assert failed["reason"]["code"] == "REMEDIATION_DENIED" and failed["reason"]["step"] == "tag"
        # the compensations of the completed steps, the last completed first; the gated step never ran
        assert [e for e in effects() if e.startswith(("unversion:", "delete:")) and e.endswith(locked)] == [
            f"unversion:{locked}", f"delete:{locked}"]
        assert f"tag:{locked}" not in effects()
        again = await client.call_tool("resolve_workflow", {"workflow_id": wid, "resolution": "denied"})
        assert "not remediation_pending" in error_text(again)


# ---- 5. bad arguments: one sentence ---------------------------------------------------------


async def test_bad_arguments_are_one_sentence_naming_the_argument(tmp_path: Path, effects_env: Path) -> None:
    async with over_stdio(tmp_path) as client:
        missing = error_text(await client.call_tool("get_workflow_status", {}))
        assert "get_workflow_status" in missing and "workflow_id" in missing
        as_string = error_text(await client.call_tool("start_workflow", {"workflow_type": "aws.s3.create_bucket",
                                                                          "inputs": "bucket=x"}))
        assert "start_workflow" in as_string and "inputs" in as_string
        negative = error_text(await client.call_tool("watch_workflow", {"workflow_id": "x", "timeout_seconds": -1}))
        assert "watch_workflow" in negative and "timeout_seconds" in negative
        # nothing was started by the refused start
        assert (await call(client, "list_workflows"))["runs"] == []


# ---- 6. the short text of a start -----------------------------------------------------------


async def test_a_start_answers_a_one_line_sentence_and_the_contracts_content(tmp_path: Path, effects_env: Path) -> None:
    async with over_stdio(tmp_path) as client:
        result = await client.call_tool("start_workflow", {"workflow_type": "aws.s3.create_bucket",
                                                           "inputs": {"bucket": "short-1"}})
        assert not result.is_error, result.content
        data = result.structured_content
        assert data is not None and set(data) == {"workflow_id", "status"} and data["status"] == "PENDING"
        wid = data["workflow_id"]
        first = text_of(result.content[0])
        assert "\n" not in first and wid in first and "PENDING" in first
        assert not first.lstrip().startswith("{")  # a sentence, not the JSON
        assert json.loads(text_of(result.content[-1])) == data  # the JSON after it, for text-only clients
        assert (await watch(client, wid))["status"] == "COMPLETED"


# ---- 7. paging ------------------------------------------------------------------------------


async def test_lists_page_with_a_cursor_and_refuse_a_made_up_one(served: Any) -> None:
    svc, keys, _ = served
    async with over_http(svc.url, keys["admin"]) as client:
        started = [(await call(client, "start_workflow", workflow_type="aws.s3.create_bucket",
                               inputs={"bucket": f"page-{i}"}))["workflow_id"] for i in range(5)]
        seen: list[str] = []
        cursor: str | None = None
        pages = 0
        while True:
            page = await call(client, "list_workflows", limit=2, **({"cursor": cursor} if cursor else {}))
            assert 1 <= len(page["runs"]) <= 2, page
            seen += [r["workflow_id"] for r in page["runs"]]
            pages += 1
            cursor = page["next"]
            if cursor is None:
                break
            assert pages < 10, "the cursor does not end"
        assert len(seen) == len(set(seen)), seen  # no run twice
        assert set(seen) == set(started)  # none missing
        assert pages == 3

        everything = [t["name"] for t in (await call(client, "list_workflow_types"))["types"]]
        assert len(everything) > 4
        names: list[str] = []
        cursor = None
        while True:
            page = await call(client, "list_workflow_types", limit=2, **({"cursor": cursor} if cursor else {}))
            assert 1 <= len(page["types"]) <= 2, page
            names += [t["name"] for t in page["types"]]
            cursor = page["next"]
            if cursor is None:
                break
            assert len(names) <= len(everything), "the cursor does not end"
        assert names == everything

        made_up = error_text(await client.call_tool("list_workflows", {"limit": 2, "cursor": "not-a-cursor"}))
        assert "cursor" in made_up
        made_up = error_text(await client.call_tool("list_workflow_types", {"limit": 2, "cursor": "zz-top"}))
        assert "cursor" in made_up


# ---- 8. the resource catalog://types/{name} -------------------------------------------------


async def test_the_type_resource_over_http_with_and_without_a_valid_key(served: Any) -> None:
    svc, keys, _ = served
    async with over_http(svc.url, keys["admin"]) as client:
        read = await client.read_resource("catalog://types/aws.s3.create_bucket")
        shown = json.loads(text_of(read.contents[0]))
        assert shown["workflow_type"] == "aws.s3.create_bucket"
        assert shown["input_schema"]["required"] == ["bucket"]
        assert set(shown["input_schema"]["properties"]) == {"bucket"}
        with pytest.raises(MCPError) as unknown:
            await client.read_resource("catalog://types/aws.s3.create_buckt")
        assert "did you mean 'aws.s3.create_bucket'?" in unknown.value.message
        assert "Traceback" not in unknown.value.message
    with pytest.raises(Exception) as refused_read:  # an unknown key opens no session, so reads nothing
        async with over_http(svc.url, "flk_not-a-key") as client:
            await client.read_resource("catalog://types/aws.s3.create_bucket")
    assert refusal_of(refused_read.value) == "the API key is unknown or disabled"


# ---- 9. reads and refusals under write approval ---------------------------------------------


async def approvals_opened(db: str, application: str) -> int:
    [(n,)] = await rows(db, "SELECT count(*) FROM executions WHERE workflow = ? AND application = ?",
                        "flowli.mcp_approval", application)
    return int(n)


async def test_under_write_approval_a_viewers_read_runs_and_its_retry_is_refused(served: Any, names: Any) -> None:
    svc, keys, acme = served
    gone = names("gone")
    done = flowli(svc.db, "apps", "set", acme, "--mcp-approval", "required")
    assert done.returncode == 0, done.stderr
    # a failed run, started over the HTTP API (which asks no approval)
    async with httpx2.AsyncClient(base_url=svc.url, headers={"X-API-Key": keys["admin"]}, timeout=30) as http:
        made = await http.post("/catalog/runs", json={"workflow_type": "ops.flaky", "inputs": {"name": gone}})
        assert made.status_code == 201, made.text
        failed_wid = made.json()["workflow_id"]
    async with over_http(svc.url, keys["admin"]) as client:
        assert (await watch(client, failed_wid))["status"] == "FAILED"
        asked = await call(client, "start_workflow", workflow_type="aws.s3.create_bucket", inputs={"bucket": "ask"})
        assert asked["status"] == "approval_required"  # the admin's write waits for a person
    assert await approvals_opened(svc.db, acme) == 1
    async with over_http(svc.url, keys["viewer"], header="x-api-key") as client:
        data = await call(client, "start_workflow", workflow_type="aws.s3.list_buckets", inputs={})
        assert data["status"] == "PENDING" and "approval_id" not in data, data
        assert (await watch(client, data["workflow_id"]))["status"] == "COMPLETED"
        denied = error_text(await client.call_tool("retry_workflow", {"workflow_id": failed_wid}))
        assert "runs:operate" in denied and "runs:start" not in denied, denied
        assert (await call(client, "get_workflow_status", workflow_id=failed_wid))["status"] == "FAILED"
    assert await approvals_opened(svc.db, acme) == 1  # the refused retry opened no approval
    assert effects().count(f"flaky:{gone}") == 1


# ---- 10. force-terminate, guarded -----------------------------------------------------------


async def test_force_terminate_is_refused_while_the_run_progresses_and_then_ends_it(served: Any) -> None:
    svc, keys, _ = served
    async with over_http(svc.url, keys["admin"]) as client:
        wid = (await call(client, "start_workflow", workflow_type="ops.await_clerk",
                          inputs={"note": "sign"}))["workflow_id"]

        async def waiting() -> dict[str, Any] | None:
            runs = (await call(client, "list_stuck_workflows", older_than_seconds=0))["runs"]
            mine = [r for r in runs if r["workflow_id"] == wid and "clerks" in json.dumps(r["waiting_on"])]
            return mine[0] if mine else None

        stuck = await until(waiting, 30, "the run waits for a clerk")
        early = error_text(await client.call_tool("force_terminate_workflow", {
            "workflow_id": wid, "reason": "the clerk left"}))
        assert "min_idle" in early and "progressed" in early, early
        assert (await call(client, "get_workflow_status", workflow_id=wid))["status"] == "PENDING"
        ended = await call(client, "force_terminate_workflow", workflow_id=wid, reason="the clerk left",
                           min_idle_seconds=0, expected_last_seq=stuck["last_seq"])
        assert ended == {"workflow_id": wid, "status": "FAILED"}
        status = await call(client, "get_workflow_status", workflow_id=wid)
        assert status["status"] == "FAILED", status
        assert status["reason"]["message"] == "the clerk left"
        assert status["reason"]["code"] == "TERMINATED"


async def test_watch_sends_progress_over_streamable_http_while_a_clerk_answers(served: Any, tmp_path: Path) -> None:
    import asyncio


    svc, keys, acme = served
    async with over_http(svc.url, keys["admin"]) as client:
        wid = (await call(client, "start_workflow", workflow_type="ops.await_clerk", inputs={"note": "x"}))["workflow_id"]
        progress: list[str] = []

        async def on_progress(done: float, total: float | None, message: str | None) -> None:
            progress.append(message or "")

        # a clerk answers from this process while the watch waits in serve's
        answering = asyncio.create_task(clerk_signs(svc.db, tmp_path / "clerk-bucket", pause=0.5, application=acme))
        watched = await client.call_tool("watch_workflow", {"workflow_id": wid, "timeout_seconds": 60},
                                         progress_callback=on_progress)
        await answering
    assert watched.structured_content["status"] == "COMPLETED"
    assert watched.structured_content["output"] == {"signed": True}
    # each transition seen while it waited, in the journal's order (the clerk's answer among them;
    # on a slow machine the run's suspension may come after the watch began); it returns once the
    # run ended
    seqs = [int(p.rsplit("(seq ", 1)[1].rstrip(")")) for p in progress]
    assert any(p.startswith("frame.completed (seq ") for p in progress), progress
    assert seqs == sorted(set(seqs)), progress
    seqs = [int(p.rsplit("seq ", 1)[1].rstrip(")")) for p in progress]
    assert seqs == sorted(seqs) and len(set(seqs)) == len(seqs), progress
