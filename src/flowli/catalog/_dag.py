"""The built-in workflows of the catalog: ``flowli.dag``, which runs a compiled composition
layer by layer (the steps of a layer are child executions that run together), with remediation
gates and compensation (version 2 is a decider, ``_dag_decider``; version 1, the Python workflow
below, is kept to finish the runs it started); and ``composition.save``, which validates, compiles and stores a
composition durably, for the caller's application."""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

from flowli.domain import NO_RETRY, StepFailed
from flowli.engine import Context, Registry

from ._compose import compile_definition, validate, virtual_name
from ._dag_decider import INITIAL, REMEDIATION, RESOLUTION, VERSION, arguments, decider, evolve, kwargs_of, step_key
from ._errors import CompositionConflict, CompositionInvalid, InputsInvalid, RemediationDenied, UnknownType
from ._types import lookup

DAG = "flowli.dag"
SAVE = "composition.save"
COMPOSITION = "composition"
"""The item kind of a saved composition (key ``name@version``, scoped by application)."""
__all__ = ["DAG", "REMEDIATION", "RESOLUTION", "SAVE", "COMPOSITION", "VERSION", "install"]


def conflict(name: str, version: str, saved_hash: str) -> CompositionConflict:
    return CompositionConflict(f"composition {name!r} version {version!r} is saved already with another definition"
                               f" ({saved_hash}); give the changed definition a new version")


def step_of_key(key: str) -> str:
    return key.split("#", 1)[0].split("~", 1)[0]


def dag_args(args: list[Any]) -> list[Any]:
    """A dag run's arguments ``[workflow_type, compiled, inputs]``: a run of the decider has them
    as its one input, a run of the version 1 workflow as its arguments."""
    if len(args) == 1 and isinstance(args[0], list):
        return list(args[0])
    return list(args)


async def run_dag(ctx: Context, registry: Registry, compiled: dict[str, Any], inputs: dict[str, Any]) -> dict[str, Any]:
    state: dict[str, Any] = {"steps": {}}
    done: list[tuple[dict[str, Any], dict[str, Any], Any]] = []

    async def attempt(step: dict[str, Any], n: int) -> tuple[str, Any, dict[str, Any]]:
        kwargs = kwargs_of(step, inputs, state["steps"])
        args = arguments(registry, step, kwargs)
        try:
            return "ok", await ctx.child(step["workflow_type"], *args, key=step_key(step["name"], n)), kwargs
        except StepFailed as exc:
            return "failed", exc, kwargs

    last: list[str] = []
    for layer in compiled["layers"]:
        steps = layer["steps"]
        outcomes = await ctx.gather(*[attempt(s, 1) for s in steps])
        for step, (how, value, kwargs) in zip(steps, outcomes):
            if how == "ok":
                state["steps"][step["name"]] = value
                done.append((step, kwargs, value))
        plain = [value for how, value, _ in outcomes if how == "failed" and value.code != REMEDIATION]
        if plain:
            raise plain[0]
        for step, (how, value, kwargs) in zip(steps, outcomes):
            if how == "ok":
                continue
            n = 1
            while how == "failed":  # a remediation gate: park until resolve_workflow answers it
                resolution = await _resolution(ctx, value.fid)
                if resolution == "denied":
                    compensated, failures = await _compensate(ctx, registry, done)
                    raise RemediationDenied(step["name"], value.message, compensated, failures)
                n += 1
                how, value, kwargs = await attempt(step, n)
                if how == "failed" and value.code != REMEDIATION:
                    raise value
            state["steps"][step["name"]] = value
            done.append((step, kwargs, value))
        last = [s["name"] for s in steps]
    return {name: state["steps"][name] for name in last}


async def _resolution(ctx: Context, fid: str) -> str:
    while True:
        message = await ctx.receive(RESOLUTION)
        if isinstance(message, dict) and message.get("fid") == fid and message.get("resolution") in ("remediated", "denied"):
            return str(message["resolution"])


async def _compensate(ctx: Context, registry: Registry,
                      done: list[tuple[dict[str, Any], dict[str, Any], Any]]) -> tuple[list[str], list[str]]:
    """Run the compensation of each completed step, in reverse: its type's ``compensate`` type,
    given the step's output fields and its inputs by name (its inputs win)."""
    compensated: list[str] = []
    failures: list[str] = []
    for step, kwargs, output in reversed(done):
        undo = registry.get(step["workflow_type"]).meta.compensate
        if undo is None:
            continue
        try:
            ctype = lookup(registry, undo)
            given = {**(output if isinstance(output, dict) else {}), **kwargs}
            args = ctype.arguments({k: v for k, v in given.items() if k in ctype.model.model_fields})
            await ctx.child(undo, *args, key=f"{step['name']}~compensate")
            compensated.append(step["name"])
        except (StepFailed, UnknownType, InputsInvalid) as exc:
            failures.append(f"{step['name']} ({exc})")
    return compensated, failures


def install(registry: Registry) -> None:
    """Register the catalog's built-in workflows in ``registry`` (once)."""
    if DAG in registry.names():
        return

    async def dag(ctx: Context, workflow_type: str, compiled: dict[str, Any], inputs: dict[str, Any]) -> dict[str, Any]:
        return await run_dag(ctx, registry, compiled, inputs)

    def compiled_form(definition: dict[str, Any]) -> dict[str, Any]:
        v = validate(registry, definition)
        if v.errors:
            raise CompositionInvalid(v.errors)
        return {"compiled": compile_definition(definition), "warnings": v.warnings}

    async def save(ctx: Context, definition: dict[str, Any]) -> dict[str, Any]:
        """A saved composition is an item of the application; a changed definition under a saved
        version is refused (checked again here: two saves may race past the caller's check)."""
        made = await ctx.step(compiled_form, definition, retry=NO_RETRY)
        application = ctx.application

        async def store(made: dict[str, Any]) -> dict[str, Any]:
            compiled = made["compiled"]
            name, version = compiled["name"], compiled["version"]
            body = {"name": name, "version": version, "workflow_type": virtual_name(name, version),
                    "definition": definition, "compiled": compiled,
                    "content_hash": compiled["metadata"]["content_hash"],
                    "saved_at": datetime.now(timezone.utc).isoformat(), "saved_by": ctx.eid}
            item, created = await ctx.items.put(COMPOSITION, application or "", f"{name}@{version}", body,
                                                datetime.now(timezone.utc))
            if not created and item.body["content_hash"] != body["content_hash"]:
                raise conflict(name, version, item.body["content_hash"])
            return {"workflow_type": item.body["workflow_type"], "content_hash": item.body["content_hash"],
                    "created": created, "warnings": made["warnings"]}

        return await ctx.step(store, made, retry=NO_RETRY)

    registry.add(dag, DAG)  # version 1: it finishes the runs it started before the decider
    registry.decider(DAG, version=VERSION, initial=INITIAL, evolve=evolve, shares=True)(decider(registry))
    registry.add(save, SAVE, kind="state_machine", permissions=["catalog:write"],
                 description="Validate, compile and store a composition; it becomes runnable as"
                             " virtual.<name>@<version>.")


