"""Compositions: a declarative definition of layers of steps, validated against the live catalog
in three phases (structure, references, compatibility) and compiled to the form the dag runner
executes, stamped with the content hash of the definition."""

from __future__ import annotations

import hashlib
import re
from typing import Any

from flowli.domain import canonical
from flowli.engine import Registry, problems, validation_error

from ._errors import UnknownType
from ._types import CatalogType, lookup

COMPILED_FORMAT_VERSION = 1
VIRTUAL = "virtual."
_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.\-]*$")
_SOURCES = ("input", "step", "static")


def content_hash(definition: dict[str, Any]) -> str:
    return "sha256:" + hashlib.sha256(canonical(definition).encode()).hexdigest()


def virtual_name(name: str, version: str) -> str:
    return f"{VIRTUAL}{name}@{version}"


def _json_types(schema: dict[str, Any]) -> set[str]:
    """The JSON types a schema admits (empty: any)."""
    if "type" in schema:
        t = schema["type"]
        return set(t) if isinstance(t, list) else {t}
    if "anyOf" in schema:
        out: set[str] = set()
        for s in schema["anyOf"]:
            sub = _json_types(s)
            if not sub:
                return set()
            out |= sub
        return out
    if "$ref" in schema or "allOf" in schema:
        return {"object"}
    return set()


def _compatible(source: set[str], target: set[str]) -> bool:
    """Whether a value of JSON types ``source`` fits a parameter of types ``target``."""
    if not source or not target or source & target:
        return True
    return source <= {"integer"} and "number" in target


def _type_word(types: set[str]) -> str:
    return "/".join(sorted(types)) if types else "any"


class Validation:
    """The three phases over one definition; ``errors`` and ``warnings`` are plain sentences,
    each starting with ``step '<name>': `` or ``layer '<name>': `` (``composition: `` for the
    definition as a whole)."""

    def __init__(self, registry: Registry, definition: Any, saved: bool = False):
        self.registry = registry
        self.definition = definition
        self.saved = saved
        """A definition saved already: layers keep fields that they were saved with (layers did not
        refuse unknown fields before), so a saved version stays runnable."""
        self.errors: list[str] = []
        self.warnings: list[str] = []
        self.types: dict[str, CatalogType] = {}
        """The type of each step whose workflow_type resolved."""
        self.layer_of: dict[str, int] = {}
        self.inputs: dict[str, tuple[str, dict[str, Any], Any, bool]] = {}
        """Each composition input field: (first step using it, its schema, its annotation, required)."""

    def run(self) -> Validation:
        if self._shape():
            self._structure()
            self._references()
            self._compatibility()
        return self

    # ---- the authoring shape --------------------------------------------------------------

    def _shape(self) -> bool:
        d = self.definition
        if not isinstance(d, dict):
            self.errors.append(f"composition: the definition must be a JSON object, got {type(d).__name__}")
            return False
        for key in ("name", "version"):
            if not isinstance(d.get(key), str) or not d[key].strip():
                self.errors.append(f"composition: {key} must be a non-empty string, got {d.get(key)!r}")
        if isinstance(d.get("name"), str) and d["name"] and not _NAME.match(d["name"]):
            self.errors.append(f"composition: name {d['name']!r} may hold letters, digits, _ . - only")
        unknown = sorted(set(d) - {"name", "version", "layers", "description"})
        if unknown:
            self.errors.append(f"composition: unknown field {unknown[0]!r} (a definition has name, version, layers)")
        layers = d.get("layers")
        if not isinstance(layers, list) or not layers:
            self.errors.append("composition: layers must be a non-empty list of layers")
            return False
        for i, layer in enumerate(layers):
            if not isinstance(layer, dict):
                self.errors.append(f"layer '#{i + 1}': a layer must be an object with name and steps")
                continue
            given = layer.get("name")
            lname = given if isinstance(given, str) and given else f"#{i + 1}"
            if lname == f"#{i + 1}":
                self.errors.append(f"layer '{lname}': name must be a non-empty string")
            unknown = sorted(set(layer) - {"name", "steps", "description"})
            if unknown and not self.saved:
                self.errors.append(f"layer '{lname}': unknown field {unknown[0]!r} (a layer has name, steps)")
            steps = layer.get("steps")
            if not isinstance(steps, list) or not steps:
                self.errors.append(f"layer '{lname}': steps must be a non-empty list of steps")
                continue
            for j, step in enumerate(steps):
                self._shape_step(lname, j, step)
        return not self.errors

    def _shape_step(self, lname: str, j: int, step: Any) -> None:
        if not isinstance(step, dict):
            self.errors.append(f"layer '{lname}': step #{j + 1} must be an object with name, workflow_type and"
                               " input_mapping")
            return
        sname = step.get("name")
        if not isinstance(sname, str) or not sname:
            self.errors.append(f"layer '{lname}': step #{j + 1} needs a name")
            return
        where = f"step '{sname}': "
        if not _NAME.match(sname):
            self.errors.append(f"{where}the name may hold letters, digits, _ . - only")
        if not isinstance(step.get("workflow_type"), str) or not step["workflow_type"]:
            self.errors.append(f"{where}workflow_type must be the name of a workflow type")
        unknown = sorted(set(step) - {"name", "workflow_type", "input_mapping", "description"})
        if unknown:
            self.errors.append(f"{where}unknown field {unknown[0]!r} (a step has name, workflow_type, input_mapping)")
        mapping = step.get("input_mapping", {})
        if not isinstance(mapping, dict):
            self.errors.append(f"{where}input_mapping must be an object of parameter: source")
            return
        for param, src in mapping.items():
            if not isinstance(src, dict) or src.get("source") not in _SOURCES:
                self.errors.append(f"{where}input '{param}' needs a source of input, step or static, got {src!r}")
                continue
            kind = src["source"]
            need = {"input": ("field",), "step": ("step", "field"), "static": ("value",)}[kind]
            for key in need:
                if key not in src or (key != "value" and (not isinstance(src[key], str) or not src[key])):
                    self.errors.append(f"{where}input '{param}' (source {kind}) needs {key}")
            extra = sorted(set(src) - {"source", *need})
            if extra:
                self.errors.append(f"{where}input '{param}' (source {kind}) has unknown field {extra[0]!r}")
            if kind == "static" and isinstance(src.get("value"), dict) and "$input" in src["value"]:
                self.errors.append(f"{where}input '{param}': a static value may not hold the key $input")

    # ---- phase 1: structure ---------------------------------------------------------------

    def _steps(self) -> list[tuple[int, dict[str, Any]]]:
        return [(i, s) for i, layer in enumerate(self.definition["layers"]) for s in layer["steps"]]

    def _structure(self) -> None:
        seen_layers: set[str] = set()
        for layer in self.definition["layers"]:
            if layer["name"] in seen_layers:
                self.errors.append(f"layer '{layer['name']}': the name is used by another layer")
            seen_layers.add(layer["name"])
        for i, step in self._steps():
            if step["name"] in self.layer_of:
                self.errors.append(f"step '{step['name']}': the name is used by another step")
            else:
                self.layer_of[step["name"]] = i
        for i, step in self._steps():
            for param, src in step.get("input_mapping", {}).items():
                if src["source"] != "step":
                    continue
                other = src["step"]
                where = f"step '{step['name']}': input '{param}' maps step '{other}'"
                if other not in self.layer_of:
                    self.errors.append(f"{where}, which is not a step of this composition")
                elif other == step["name"]:
                    self.errors.append(f"{where}, itself: a cycle")
                elif self.layer_of[other] >= i:
                    self.errors.append(f"{where}, which is not in an earlier layer (a cycle, or a step of the same"
                                       " layer)")

    # ---- phase 2: references --------------------------------------------------------------

    def _references(self) -> None:
        for _, step in self._steps():
            try:
                self.types[step["name"]] = lookup(self.registry, step["workflow_type"], f"step '{step['name']}': ")
            except UnknownType as exc:
                self.errors.append(str(exc))

    # ---- phase 3: compatibility -----------------------------------------------------------

    def _compatibility(self) -> None:
        used = {src["step"] for _, step in self._steps() for src in step.get("input_mapping", {}).values()
                if src["source"] == "step"}
        for _, step in self._steps():
            ctype = self.types.get(step["name"])
            if ctype is None:
                continue
            where = f"step '{step['name']}': "
            fields = ctype.model.model_fields
            props = ctype.input_schema.get("properties", {})
            mapping = step.get("input_mapping", {})
            for param in mapping:
                if param not in fields:
                    self.errors.append(f"{where}'{param}' is not a parameter of {ctype.name!r} (it takes"
                                       f" {', '.join(fields) or 'none'})")
            for param, info in fields.items():
                if param in mapping:
                    continue
                if info.is_required():
                    self.errors.append(f"{where}required input '{param}' of {ctype.name!r} is not mapped")
                else:
                    self.warnings.append(f"{where}optional input '{param}' is not mapped; its default applies")
            for param, src in mapping.items():
                if param not in fields:
                    continue
                target = props.get(param, {})
                self._source(where, step["name"], param, src, fields[param], target, used)
        last = len(self.definition["layers"]) - 1
        for i, step in self._steps():
            if i < last and step["name"] not in used and step["name"] in self.types:
                self.warnings.append(f"step '{step['name']}': its output is used by no later step")

    def _source(self, where: str, sname: str, param: str, src: dict[str, Any], info: Any, target: dict[str, Any],
                used: set[str]) -> None:
        want = _json_types(target)
        if src["source"] == "static":
            from pydantic import TypeAdapter  # on first use, as flowli.engine._typing does

            try:
                TypeAdapter(info.annotation).validate_python(src["value"])
            except validation_error() as exc:
                self.errors.append(f"{where}static value of input '{param}' does not fit its schema:"
                                   f" {'; '.join(problems(exc, param))}")
            except Exception:  # an annotation pydantic cannot check: accepted
                pass
        elif src["source"] == "input":
            field = src["field"]
            known = self.inputs.get(field)
            if known is None:
                self.inputs[field] = (sname, target, info.annotation, info.is_required())
            else:
                first, schema, ann, required = known
                have = _json_types(schema)
                if have and want and have != want:
                    self.errors.append(f"{where}input field '{field}' is used as {_type_word(want)} here and as"
                                       f" {_type_word(have)} by step '{first}'")
                self.inputs[field] = (first, schema, ann, required or info.is_required())
        else:
            other = src["step"]
            otype = self.types.get(other)
            if otype is None or other not in self.layer_of:
                return
            out = otype.output_schema
            props = out.get("properties")
            if out.get("$ref") or (out and props is None and out.get("type") != "object"):
                if out and _json_types(out) - {"object"}:
                    self.errors.append(f"{where}input '{param}' maps field '{src['field']}' of step '{other}', whose"
                                       f" output ({otype.name}) is {_type_word(_json_types(out))}, not an object")
                return
            if props is None:
                return  # an object of unknown fields: nothing to check
            if src["field"] not in props:
                self.errors.append(f"{where}input '{param}' maps field '{src['field']}' of step '{other}', which its"
                                   f" output ({otype.name}) does not have; it has {', '.join(props) or 'no field'}")
                return
            have = _json_types(props[src["field"]])
            if not _compatible(have, want):
                self.errors.append(f"{where}input '{param}' is {_type_word(want)}, but field '{src['field']}' of step"
                                   f" '{other}' is {_type_word(have)}")


def validate(registry: Registry, definition: Any, saved: bool = False) -> Validation:
    return Validation(registry, definition, saved).run()


def compile_definition(definition: dict[str, Any]) -> dict[str, Any]:
    """The compiled form: each step's ``input`` (statics and ``{"$input": field}``), its
    ``state_data`` (the step sources), ``"type": "dag"`` and the metadata stamp."""
    layers = []
    for layer in definition["layers"]:
        steps = []
        for step in layer["steps"]:
            inputs: dict[str, Any] = {}
            state: dict[str, Any] = {}
            for param, src in step.get("input_mapping", {}).items():
                if src["source"] == "static":
                    inputs[param] = src["value"]
                elif src["source"] == "input":
                    inputs[param] = {"$input": src["field"]}
                else:
                    state[param] = {"step": src["step"], "field": src["field"]}
            steps.append({"name": step["name"], "workflow_type": step["workflow_type"], "input": inputs,
                          "state_data": state})
        layers.append({"name": layer["name"], "steps": steps})
    return {"name": definition["name"], "version": definition["version"], "type": "dag", "layers": layers,
            "metadata": {"content_hash": content_hash(definition), "compiled_format_version": COMPILED_FORMAT_VERSION}}


def input_fields(v: Validation) -> dict[str, tuple[Any, bool]]:
    """The composition's own inputs: field → (annotation, required)."""
    return {name: (ann, required) for name, (_, _, ann, required) in v.inputs.items()}
