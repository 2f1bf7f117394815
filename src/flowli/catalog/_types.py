"""A catalog type: a registered workflow with its metadata and its schemas, derived from its
type hints through pydantic (``TypeAdapter`` and a model of its parameters)."""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from flowli.engine import Registry, WorkflowDef, input_model, problems, validation_error

from ._errors import InputsInvalid, UnknownType

if TYPE_CHECKING:
    from pydantic import BaseModel

INTERNAL = "flowli."
"""The engine's own workflows (the pipeline, the dag runner) are not catalog types."""


def namespace_of(name: str) -> str:
    """``aws.s3.create_bucket`` is in ``aws.s3``; a name without a dot is its own namespace."""
    head, sep, _ = name.rpartition(".")
    return head if sep else name


@dataclass(frozen=True)
class CatalogType:
    wf: WorkflowDef

    @property
    def name(self) -> str:
        return self.wf.name

    @property
    def kind(self) -> str:
        return self.wf.meta.kind

    @functools.cached_property
    def model(self) -> type[BaseModel]:
        return input_model(self.wf.name, self.wf.fn)

    @functools.cached_property
    def input_schema(self) -> dict[str, Any]:
        schema = self.model.model_json_schema()
        schema.pop("title", None)
        return schema

    @functools.cached_property
    def output_schema(self) -> dict[str, Any]:
        adapter = self.wf.output
        return adapter.json_schema() if adapter is not None else {}

    def fields(self) -> list[dict[str, Any]]:
        props = self.input_schema.get("properties", {})
        required = set(self.input_schema.get("required", []))
        out = []
        for name, info in self.model.model_fields.items():
            schema = props.get(name, {})
            field: dict[str, Any] = {"name": name, "type": schema.get("type", _shape(schema)), "required": name in required}
            if name not in required:
                field["default"] = info.default if _jsonable(info.default) else None
            if "description" in schema:
                field["description"] = schema["description"]
            out.append(field)
        return out

    def summary(self) -> dict[str, Any]:
        m = self.wf.meta
        return {"name": self.name, "namespace": namespace_of(self.name), "workflow_kind": m.kind,
                "featured": m.featured, "scope": m.scope, "description": m.description, "version": self.wf.version}

    def schema(self) -> dict[str, Any]:
        m = self.wf.meta
        return {"workflow_type": self.name, "version": self.wf.version, "input_schema": self.input_schema,
                "output_schema": self.output_schema, "fields": self.fields(), "read_only": m.read_only,
                "has_prerequisites": bool(m.prerequisites), "workflow_kind": m.kind}

    def arguments(self, inputs: Any) -> list[Any]:
        """The positional arguments of a start from one JSON object of inputs by name, validated
        first: InputsInvalid names every bad field."""
        if not isinstance(inputs, dict):
            raise InputsInvalid(self.name, [f"inputs must be a JSON object of inputs by name, got {type(inputs).__name__}"])
        try:
            validated = self.model.model_validate(inputs)
        except validation_error() as exc:
            raise InputsInvalid(self.name, problems(exc)) from None
        dumped = validated.model_dump(mode="json")
        return [dumped[name] for name in self.model.model_fields]


def _shape(schema: dict[str, Any]) -> str:
    if "$ref" in schema or "allOf" in schema:
        return "object"
    if "anyOf" in schema:
        kinds = [s.get("type", "object") for s in schema["anyOf"] if s.get("type") != "null"]
        return kinds[0] if len(kinds) == 1 else "any"
    return "any"


def _jsonable(value: Any) -> bool:
    return value is None or isinstance(value, (str, int, float, bool, list, dict))


def type_of(wf: WorkflowDef) -> CatalogType:
    """The catalog type of a workflow definition, built once and kept with it (its schemas are
    pydantic models, costly to build)."""
    found = wf.__dict__.get("_catalog_type")
    if found is None:
        found = wf.__dict__["_catalog_type"] = CatalogType(wf)
    return found  # type: ignore[no-any-return]


def types_of(registry: Registry) -> dict[str, CatalogType]:
    """The catalog types of a registry by name (the highest version of each)."""
    return {name: type_of(registry.get(name)) for name in registry.names() if not name.startswith(INTERNAL)}


def lookup(registry: Registry, name: Any, where: str = "") -> CatalogType:
    if not isinstance(name, str) or not name:
        raise UnknownType(str(name), [], where)
    if name.startswith(INTERNAL) or name not in registry.names():
        raise UnknownType(name, [n for n in registry.names() if not n.startswith(INTERNAL)], where)
    return type_of(registry.get(name))
