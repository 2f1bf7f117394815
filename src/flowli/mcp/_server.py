"""The MCP server: the catalog's loop (discover, schema, prerequisites, start, watch, recover)
as the tools of the contract, with the prompt ``diagnose_workflow_run`` and the resources
``concept://dag``, ``knowledge://mcp/execution`` and ``catalog://types/{name}``. Built on the
official SDK's ``MCPServer``; every tool calls the Catalog (so the engine's transition path and
RBAC), as the principal of its session."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import Awaitable, Callable
from dataclasses import replace
from typing import Annotated, Any

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ResourceError, ToolError
from mcp.types import ToolAnnotations
from pydantic import Field

from flowli.access import Applications, ServiceError, key_of
from flowli.catalog import MAX_IDLE_SECONDS, Catalog, CatalogError
from flowli.domain import DECIDE_RUNS, OPERATE_RUNS, WRITE_CATALOG, FlowliError, Principal, checked_eid
from flowli.engine import Engine
from flowli.services import Services

from . import _approvals as approvals
from . import _knowledge as knowledge
from ._results import Server

log = logging.getLogger("flowli.mcp")
READ = ToolAnnotations(read_only_hint=True, destructive_hint=False, open_world_hint=False)
WRITE = ToolAnnotations(read_only_hint=False, destructive_hint=False, open_world_hint=False)
CHANGES_A_RUN = ToolAnnotations(read_only_hint=False, destructive_hint=True, open_world_hint=False)
ENDS = ("COMPLETED", "FAILED", "remediation_pending")
OPERATE, DECIDE, SAVE = OPERATE_RUNS, DECIDE_RUNS, WRITE_CATALOG
"""The capabilities of the write tools (a resolve answers a decision); a start needs its type's."""
SECONDS = Field(json_schema_extra={"minimum": 0, "maximum": MAX_IDLE_SECONDS})
"""A number of seconds of an operation (the catalog checks its range; the tool's schema says it)."""

Who = Callable[[Context[Any, Any]], Awaitable[Principal]]
"""How a tool call finds its principal: from the session's credential."""


def local_admin() -> Principal:
    return Principal("mcp", "system", ("admin",))


def principal_of_key(apps: Applications) -> Callable[[str | None], Awaitable[Principal]]:

    async def resolve(key: str | None) -> Principal:
        try:
            access = await apps.authenticate(key)
        except ServiceError as exc:
            raise ToolError(exc.message) from None
        return access.principal

    return resolve


def from_headers(apps: Applications) -> Who:
    """The principal of an HTTP session: its ``Authorization: Bearer`` or ``X-API-Key`` key."""
    resolve = principal_of_key(apps)

    async def who(ctx: Context[Any, Any]) -> Principal:
        return await resolve(key_of({k.lower(): v for k, v in (ctx.headers or {}).items()}))

    return who


def from_key(apps: Applications, key: str) -> Who:
    """The principal of one API key (``flowli mcp --api-key``), read again at every call: a key
    disabled while the server runs is refused from then on."""
    resolve = principal_of_key(apps)

    async def who(_: Context[Any, Any]) -> Principal:
        return await resolve(key)

    return who


def fixed(principal: Principal) -> Who:
    async def who(_: Context[Any, Any]) -> Principal:
        return principal

    return who


async def _call(body: Awaitable[Any]) -> Any:
    """A tool's body: a refusal is one sentence (an MCP error result), never a traceback."""
    try:
        return await body
    except ToolError:
        raise
    except FlowliError as exc:  # a refusal of any kind: its one sentence
        raise ToolError(str(exc)) from None
    except (ValueError, TypeError) as exc:
        raise ToolError(str(exc)) from None
    except Exception:
        log.exception("an MCP tool failed")
        raise ToolError("internal error (the server logged it)") from None


def page(key: str, items: list[Any], limit: int, cursor: str | None) -> dict[str, Any]:
    """One page of a list in its stable order, whole items only; ``next`` is the cursor of the
    page after it (None on the last)."""
    if cursor is not None and not (cursor.isascii() and cursor.isdecimal() and int(cursor) <= len(items)):
        raise ToolError(f"cursor {cursor!r} is not one this list gave (pass a page's next)")
    start = int(cursor or 0)
    end = start + limit
    return {key: items[start:end], "next": str(end) if end < len(items) else None}


def build(services: Services, who: Who, *, name: str = "flowli") -> MCPServer:
    """The MCP server of an engine's ``services``, whose tool calls act as ``who(ctx)``."""
    engine, catalog, apps = services.engine, services.catalog, services.applications
    approvals.install(engine.registry)
    server = Server(name, instructions=knowledge.KNOWLEDGE_EXECUTION, version="1")

    async def write(ctx: Context[Any, Any], tool: str, arguments: dict[str, Any],
                    do: Callable[[Principal], Awaitable[Any]], capability: str | None = None) -> dict[str, Any]:
        """A write tool: carried out now, or (the application requires it) an approval opened.
        What the write would refuse (the capability, an unknown type) is refused first; a start of
        a data type is a read, which needs no approval."""
        by = await who(ctx)
        # what the write itself would refuse is checked as if a person had approved it: an
        # assistant's key is refused what an approval could not lift, and asks for the rest
        probe = replace(by, approval="(asked)") if by.waits_for_approval else by
        if capability is not None:
            try:
                catalog.require(probe, capability, f"{tool} {arguments.get('workflow_id', '')}".strip())
            except CatalogError as exc:  # PermissionDenied, one sentence
                raise ToolError(str(exc)) from None
            read = False
        else:
            read = await _call(catalog.check_start(arguments["workflow_type"], by=probe))
        if not read and (by.waits_for_approval or await _call(approvals.required(apps, by))):
            return dict(await _call(approvals.ask(engine, tool, arguments, by)))
        return dict(await _call(do(by)))

    # ---- discover -------------------------------------------------------------------------

    @server.tool(annotations=READ, description="The namespaces of the catalog, with how many types each holds.")
    async def list_workflow_namespaces(ctx: Context[Any, Any]) -> dict[str, Any]:
        return {"namespaces": await _call(catalog.namespaces(by=await who(ctx)))}

    @server.tool(annotations=READ, description="The workflow types whose name starts with prefix and whose name or"
                                               " description holds q; each with workflow_kind, featured, scope.")
    async def list_workflow_types(ctx: Context[Any, Any], prefix: str | None = None, q: str | None = None,
                                  limit: Annotated[int, Field(ge=1, le=500)] = 100,
                                  cursor: str | None = None) -> dict[str, Any]:
        return page("types", await _call(catalog.types(prefix, q, by=await who(ctx))), limit, cursor)

    @server.tool(annotations=READ, description="The input and output schemas of a type, its fields, read_only,"
                                               " has_prerequisites and workflow_kind.")
    async def get_workflow_schema(ctx: Context[Any, Any], workflow_type: str) -> dict[str, Any]:
        return dict(await _call(catalog.schema(workflow_type, by=await who(ctx))))

    @server.tool(annotations=READ, description="What must exist before a type runs (of one variant, when given),"
                                               " with a setup guide.")
    async def get_workflow_prerequisites(ctx: Context[Any, Any], workflow_type: str,
                                         variant: str | None = None) -> dict[str, Any]:
        found = await _call(catalog.prerequisites(workflow_type, variant, by=await who(ctx)))
        return {"workflow_type": workflow_type, "prerequisites": found}

    @server.tool(annotations=READ, description="What a type is: its metadata, schemas and permissions; a saved"
                                               " composition's definition and compiled form.")
    async def get_workflow_definition(ctx: Context[Any, Any], workflow_type: str) -> dict[str, Any]:
        return dict(await _call(catalog.definition(workflow_type, by=await who(ctx))))

    @server.tool(annotations=READ, description="The layers and steps of a dag type (another type is one layer of"
                                               " one step).")
    async def get_workflow_dag(ctx: Context[Any, Any], workflow_type: str) -> dict[str, Any]:
        return dict(await _call(catalog.dag(workflow_type, by=await who(ctx))))

    # ---- runs -----------------------------------------------------------------------------

    @server.tool(annotations=WRITE, description="Start a run of a type with one JSON object of inputs by name"
                                                " (checked against its schema first). Answers workflow_id and PENDING.")
    async def start_workflow(ctx: Context[Any, Any], workflow_type: str,
                             inputs: dict[str, Any] | None = None) -> dict[str, Any]:
        args = {"workflow_type": workflow_type, "inputs": inputs or {}}
        return await write(ctx, "start_workflow", args, lambda by: catalog.start(workflow_type, inputs or {}, by=by))

    @server.tool(annotations=READ, description="The state of a run: PENDING, COMPLETED (with output), FAILED (with a"
                                               " reason) or remediation_pending (with state_data.remediation).")
    async def get_workflow_status(ctx: Context[Any, Any], workflow_id: str) -> dict[str, Any]:
        return dict(await _call(catalog.status(workflow_id, by=await who(ctx))))

    @server.tool(annotations=READ, description="Wait until a run is COMPLETED, FAILED or remediation_pending, with"
                                               " progress notifications; on timeout, its current state.")
    async def watch_workflow(ctx: Context[Any, Any], workflow_id: str,
                             timeout_seconds: Annotated[float, Field(gt=0, le=3600)] = 300) -> dict[str, Any]:
        by = await who(ctx)
        return dict(await _call(_watch(engine, catalog, ctx, by, workflow_id, timeout_seconds)))

    @server.tool(annotations=READ, description="The append-only transitions of a run, oldest first; payloads"
                                               " (input, output, error, state_data) only with include_state_data;"
                                               " a page of limit, the next after next_after_seq.")
    async def get_workflow_history(ctx: Context[Any, Any], workflow_id: str, include_state_data: bool = False,
                                   after_seq: int | None = None,
                                   limit: Annotated[int, Field(ge=1, le=1000)] = 200) -> dict[str, Any]:
        found = await _call(catalog.history(workflow_id, include_state_data, by=await who(ctx)))
        rows = [h for h in found if after_seq is None or h["seq"] > after_seq]
        page = rows[:limit]  # whole transitions only: the next page starts after the last one here
        return {"workflow_id": workflow_id, "history": page,
                "next_after_seq": page[-1]["seq"] if len(rows) > limit else None}

    @server.tool(annotations=READ, description="Runs, newest first, a page at a time (pass next as cursor).")
    async def list_workflows(ctx: Context[Any, Any], workflow_type: str | None = None, status: str | None = None,
                             limit: Annotated[int, Field(ge=1, le=200)] = 20,
                             cursor: str | None = None) -> dict[str, Any]:
        return dict(await _call(catalog.list(workflow_type, status, limit, cursor, by=await who(ctx))))

    # ---- recover --------------------------------------------------------------------------

    @server.tool(annotations=CHANGES_A_RUN, description="Re-advance a FAILED run from its last good point:"
                                                        " completed steps do not run again.")
    async def retry_workflow(ctx: Context[Any, Any], workflow_id: str) -> dict[str, Any]:
        return await write(ctx, "retry_workflow", {"workflow_id": workflow_id},
                           lambda by: catalog.retry(workflow_id, by=by), OPERATE)

    @server.tool(annotations=CHANGES_A_RUN, description="Answer a remediation gate: 'remediated' re-runs only the"
                                                        " parked step, 'denied' compensates and fails the run.")
    async def resolve_workflow(ctx: Context[Any, Any], workflow_id: str, resolution: str) -> dict[str, Any]:
        return await write(ctx, "resolve_workflow", {"workflow_id": workflow_id, "resolution": resolution},
                           lambda by: catalog.resolve(workflow_id, resolution, by=by), DECIDE)

    @server.tool(annotations=WRITE, description="Send a message (a JSON payload) to a run's channel: what its"
                                                " ctx.receive(channel) waits for; the run resumes with it.")
    async def send_signal(ctx: Context[Any, Any], workflow_id: str, channel: str, payload: Any = None) -> dict[str, Any]:
        return await write(ctx, "send_signal", {"workflow_id": workflow_id, "channel": channel, "payload": payload},
                           lambda by: catalog.signal(workflow_id, channel, payload, by=by), OPERATE)

    @server.tool(annotations=CHANGES_A_RUN, description="Request a run's cancellation, recorded with reason: it"
                                                        " stops at its next step and runs its cleanups.")
    async def cancel_workflow(ctx: Context[Any, Any], workflow_id: str, reason: str) -> dict[str, Any]:
        return await write(ctx, "cancel_workflow", {"workflow_id": workflow_id, "reason": reason},
                           lambda by: catalog.cancel(workflow_id, reason, by=by), OPERATE)

    @server.tool(annotations=READ, description="Runs that stalled before a terminal state (no progress for"
                                               " older_than_seconds, not waiting on a future timer), with waiting_on.")
    async def list_stuck_workflows(ctx: Context[Any, Any],
                                   older_than_seconds: Annotated[float, SECONDS] = 3600,
                                   limit: Annotated[int, Field(ge=1, le=200)] = 50,
                                   cursor: str | None = None) -> dict[str, Any]:
        return page("runs", await _call(catalog.stuck(older_than_seconds, by=await who(ctx))), limit, cursor)

    @server.tool(annotations=CHANGES_A_RUN, description="Append a failed terminal state to a confirmed-stale run;"
                                                        " refused while it progresses or a worker holds it.")
    async def force_terminate_workflow(ctx: Context[Any, Any], workflow_id: str, reason: str,
                                       min_idle_seconds: Annotated[float, SECONDS] = 600,
                                       expected_last_seq: int | None = None) -> dict[str, Any]:
        args = {"workflow_id": workflow_id, "reason": reason, "min_idle_seconds": min_idle_seconds,
                "expected_last_seq": expected_last_seq}
        return await write(ctx, "force_terminate_workflow", args, lambda by: catalog.terminate(
            workflow_id, reason, min_idle_seconds, expected_last_seq, by=by), OPERATE)

    # ---- compositions ---------------------------------------------------------------------

    @server.tool(annotations=READ, description="Validate a composition against the live catalog: errors and"
                                               " warnings, each naming its step or layer. Saves nothing.")
    async def validate_composition(ctx: Context[Any, Any], definition: dict[str, Any] | str) -> dict[str, Any]:
        return dict(await _call(catalog.validate_composition(definition, by=await who(ctx))))

    @server.tool(annotations=WRITE, description="Save a composition for your application: it runs as"
                                                " virtual.<name>@<version>.")
    async def save_composition(ctx: Context[Any, Any], definition: dict[str, Any] | str) -> dict[str, Any]:
        return await write(ctx, "save_composition", {"definition": definition},
                           lambda by: catalog.save_composition(definition, by=by), SAVE)

    @server.tool(annotations=READ, description="The saved compositions of your application.")
    async def list_compositions(ctx: Context[Any, Any], limit: Annotated[int, Field(ge=1, le=500)] = 100,
                                cursor: str | None = None) -> dict[str, Any]:
        return page("compositions", await _call(catalog.compositions(by=await who(ctx))), limit, cursor)

    @server.tool(annotations=READ, description="Where a write that waits for a person's approval stands:"
                                               " pending, approved (with its result), rejected or failed.")
    async def get_approval(ctx: Context[Any, Any], approval_id: str) -> dict[str, Any]:
        return dict(await _call(approvals.status(engine, approval_id, await who(ctx))))

    # ---- prompt and resources -------------------------------------------------------------

    @server.prompt(description="Diagnose a run: status, history with state data, the failing step and reason,"
                               " then remediation, retry or stuck-run triage.")
    def diagnose_workflow_run(workflow_id: str) -> str:
        return knowledge.diagnose(workflow_id)

    @server.resource("concept://dag", mime_type="text/markdown", description="DAGs and compositions.")
    def concept_dag() -> str:
        return knowledge.CONCEPT_DAG

    @server.resource("knowledge://mcp/execution", mime_type="text/markdown",
                     description="How an assistant runs workflows here: the rules, the states, how to report.")
    def knowledge_execution() -> str:
        return knowledge.KNOWLEDGE_EXECUTION

    @server.resource("catalog://types/{name}", mime_type="application/json",
                     description="One catalog type: its definition and schemas (a saved composition's too).")
    async def catalog_type(name: str, ctx: Context[Any, Any]) -> str:
        try:
            by = await who(ctx)
            shown = {**await catalog.definition(name, by=by), **await catalog.schema(name, by=by)}
        except (ToolError, CatalogError, FlowliError) as exc:  # one sentence: a bad key, a refusal, no such type
            raise ResourceError(str(exc)) from None
        return json.dumps(shown, default=str)

    return server


PARKS = ("step.parked",)
"""The events of a decider after which a run may have parked (``flowli.dag``'s remediation gate)."""


async def _watch(engine: Engine, catalog: Catalog, ctx: Context[Any, Any], by: Principal, workflow_id: str,
                 timeout: float) -> dict[str, Any]:
    """Block until the run ends or parks, on the engine's wake-ups (``engine.watch``), reporting
    each transition as progress; on timeout, the current state with ``"timed_out": true``."""
    # the journal first, then the state: an end between the two is in the state, and one after
    # both is an entry past ``after``, which the watch sees
    journal = await engine.journal(checked_eid(workflow_id), application=by.application)
    after = journal[-1].seq if journal else 0
    status = await catalog.status(workflow_id, by=by)
    if status["status"] in ENDS:
        return status
    seen = 0
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(timeout):
            async for entry in engine.watch(workflow_id, after=after, application=by.application):
                seen += 1
                # a decider's event (a dag's step.parked, say) is named by its own word
                event = entry.value.get("event") if entry.kind.value == "event" and isinstance(entry.value, dict) else None
                with contextlib.suppress(Exception):  # a client that asked for no progress
                    await ctx.report_progress(seen, None, f"{event or entry.kind.value} (seq {entry.seq})")
                if entry.kind.value.startswith("execution.") or event in PARKS:
                    status = await catalog.status(workflow_id, by=by)
                    if status["status"] in ENDS:
                        return status
    status = await catalog.status(workflow_id, by=by)
    return status if status["status"] in ENDS else {**status, "timed_out": True}
