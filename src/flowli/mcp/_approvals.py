"""Write approval. An assistant's key (``flowli keys create APP --assistant``) writes only through
an approval, on every entry point (the catalog's RBAC refuses its writes without one); and an
application may require approval of every key's writes over MCP (``flowli apps set APP
--mcp-approval required``). A write tool then answers ``{"status": "approval_required",
"approval_id", "summary"}`` at once; the approval is an execution of ``flowli.mcp_approval``,
which asks a person through the review inbox (``flowli.patterns.review``: ``flowli inbox``,
``flowli approvals approve|reject ID``, the dashboard) and, once approved, carries the write out
as the principal that asked, as it is then (a disabled key's write is not carried out). Its
``approval_id`` is that execution's eid; ``get_approval`` reads it."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from flowli.access import Applications, NotFound, ServiceError
from flowli.catalog import Catalog, CatalogError, catalog_of
from flowli.domain import NO_RETRY, Principal, Status, checked_eid
from flowli.engine import Context, Engine, Registry
from flowli.patterns import review

APPROVAL = "flowli.mcp_approval"
WRITES = ("start_workflow", "retry_workflow", "resolve_workflow", "force_terminate_workflow", "save_composition",
          "send_signal", "cancel_workflow")


def summary(tool: str, arguments: dict[str, Any]) -> str:
    """One line a person reads in the inbox: the tool and what it acts on."""
    target = arguments.get("workflow_type") or arguments.get("workflow_id")
    if tool == "save_composition":
        d = arguments.get("definition")
        target = f"{d.get('name')}@{d.get('version')}" if isinstance(d, dict) else "a composition"
    extra = ""
    if tool == "resolve_workflow":
        extra = f" as {arguments.get('resolution')}"
    elif tool in ("force_terminate_workflow", "cancel_workflow"):
        extra = f": {arguments.get('reason')}"
    elif tool == "send_signal":
        extra = f" on channel {arguments.get('channel')!r}"
    return f"{tool} {target}{extra}"


async def carry_out(catalog: Catalog, tool: str, arguments: dict[str, Any], by: Principal, key: str) -> Any:
    """The write of an approved tool call, as the assistant's principal."""
    a = arguments
    if tool == "start_workflow":
        return await catalog.start(a["workflow_type"], a.get("inputs") or {}, by=by, key=key)
    if tool == "retry_workflow":
        return await catalog.retry(a["workflow_id"], by=by)
    if tool == "resolve_workflow":
        return await catalog.resolve(a["workflow_id"], a["resolution"], by=by)
    if tool == "force_terminate_workflow":
        return await catalog.terminate(a["workflow_id"], a["reason"], a.get("min_idle_seconds", 600),
                                       a.get("expected_last_seq"), by=by)
    if tool == "save_composition":
        return await catalog.save_composition(a["definition"], by=by)
    if tool == "send_signal":
        return await catalog.signal(a["workflow_id"], a["channel"], a.get("payload"), by=by)
    if tool == "cancel_workflow":
        return await catalog.cancel(a["workflow_id"], a["reason"], by=by)
    raise CatalogError(f"{tool} is not a write that waits for approval")


async def principal_now(engine: Engine, asked_by: dict[str, Any], approval: str) -> Principal:
    """Who carries an approved write out: the principal that asked, as it is now. A principal of
    an API key is that key's now (its role now); a key disabled (or deleted) since refuses the
    write (CatalogError), however long ago a person approved it."""
    credential = asked_by.get("credential")
    if credential:
        try:
            access = await Applications.of(engine).credential_access(credential)
        except ServiceError as exc:
            raise CatalogError(f"not carried out: {exc.message}") from None
        return replace(access.principal, approval=approval)
    return Principal(asked_by["id"], asked_by["kind"], tuple(asked_by["roles"]), asked_by["application"],
                     assistant=bool(asked_by.get("assistant")), approval=approval)


def install(registry: Registry) -> None:
    """Register ``flowli.mcp_approval`` in ``registry`` (once)."""
    if APPROVAL in registry.names():
        return

    async def mcp_approval(ctx: Context, tool: str, arguments: dict[str, Any], principal: dict[str, Any],
                           text: str) -> dict[str, Any]:
        decision = await review(ctx, text, {"tool": tool, "arguments": arguments, "asked_by": principal["id"]})
        if not decision.get("approved"):
            return {"status": "rejected", "by": decision.get("by"), "reason": decision.get("reason")}
        eid = ctx.eid

        async def approved_write(tool: str, arguments: dict[str, Any]) -> Any:
            catalog = catalog_of(registry)
            if catalog is None:
                raise CatalogError("the catalog is not set up in this process")
            by = await principal_now(catalog.engine, principal, eid)
            return await carry_out(catalog, tool, arguments, by, key=f"approval:{eid}")

        result: Any = await ctx.step(approved_write, tool, arguments, retry=NO_RETRY)  # type: ignore[arg-type]
        return {"status": "approved", "by": decision.get("by"), "result": result}

    registry.add(mcp_approval, APPROVAL)


async def required(apps: Applications, principal: Principal) -> bool:
    """Whether the principal's application requires approval of its assistants' writes."""
    if principal.application is None:
        return False
    try:
        settings = await apps.settings(principal.application)
    except NotFound:
        return False  # an application with no record (code of its own, no keys): its settings are the defaults
    # any other failure (the store, ...) is raised: the write is refused, never carried out unasked
    return bool(settings.get("mcpApproval") == "required")


async def ask(engine: Engine, tool: str, arguments: dict[str, Any], principal: Principal) -> dict[str, Any]:
    """Open an approval for a write: the execution that waits for a person, then carries it out."""
    text = summary(tool, arguments)
    as_json = {"id": principal.id, "kind": principal.kind, "roles": list(principal.roles),
               "application": principal.application, "credential": principal.credential,
               "assistant": principal.assistant}
    # the write's own capability was checked already; the approval carries it out later as the
    # principal (roles and all), so the approval itself is started by the service on the
    # principal's behalf, in its application: the service's own (trusted) act
    opener = Principal(principal.id, principal.kind, (), principal.application, trusted=True)
    eid = await engine.start(APPROVAL, tool, arguments, as_json, text, by=opener)
    return {"status": "approval_required", "approval_id": eid, "summary": text}


async def status(engine: Engine, approval_id: str, principal: Principal) -> dict[str, Any]:
    """Where an approval stands: pending, approved (with the write's result), rejected, failed."""
    record = await engine.status(checked_eid(approval_id), application=principal.application)
    if record.workflow != APPROVAL:
        raise CatalogError(f"no approval {approval_id!r}")
    out: dict[str, Any] = {"approval_id": approval_id, "tool": record.args[0], "summary": record.args[3]}
    if record.status is Status.COMPLETED:
        return {**out, **record.result}
    if record.terminal:
        error = record.error or {}
        message = error.get("cause_message") or error.get("message", "")
        return {**out, "status": "failed", "reason": message}
    return {**out, "status": "pending"}
