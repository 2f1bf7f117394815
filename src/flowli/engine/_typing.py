"""A workflow's types, from its annotations through pydantic: the model of its parameters after
the context (the catalog's input schema and validation) and the adapter of its return
annotation (the output schema, and the check of a result before it is accepted).

pydantic is imported by the functions that build a model or an adapter, not at the top: a
process that runs no typed workflow (most CLI calls) does not pay its import (50-60 ms)."""

from __future__ import annotations

import dataclasses
import inspect
import logging
import typing
from typing import TYPE_CHECKING, Any, Callable

import typing_extensions

if TYPE_CHECKING:
    from pydantic import BaseModel, TypeAdapter, ValidationError

__all__ = ["input_model", "output_adapter", "problems", "structured_parameters", "validation_error"]
log = logging.getLogger("flowli.engine")


def _hints(fn: Callable[..., Any]) -> dict[str, Any]:
    try:
        return typing.get_type_hints(fn, include_extras=True)
    except Exception:  # an annotation that does not resolve: treated as not annotated
        return {}


def input_model(name: str, fn: Callable[..., Any]) -> type[BaseModel]:
    """A pydantic model with a field per parameter after the context (a default makes it
    optional; an unannotated one takes any JSON value). Extra fields are refused."""
    from pydantic import ConfigDict, create_model

    hints = _hints(fn)
    fields: dict[str, Any] = {}
    for p in list(inspect.signature(fn).parameters.values())[1:]:
        if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
            continue
        ann = hints.get(p.name, Any)
        fields[p.name] = (ann, ... if p.default is p.empty else p.default)
    model: type[BaseModel] = create_model(  # type: ignore[call-overload]
        f"{name}.input", __config__=ConfigDict(extra="forbid"), **fields)
    return model


def _structured(ann: Any) -> bool:
    from pydantic import BaseModel

    if isinstance(ann, type) and (issubclass(ann, BaseModel) or dataclasses.is_dataclass(ann)
                                  or typing_extensions.is_typeddict(ann)):
        return True
    return any(_structured(a) for a in typing.get_args(ann))


def structured_parameters(fn: Callable[..., Any]) -> dict[int, tuple[str, TypeAdapter[Any]]]:
    """The adapters of the positional parameters after the context annotated with a model, a
    dataclass or a TypedDict (alone or inside a list, a dict, an optional), by position. A
    parameter whose adapter pydantic cannot build is left out (its argument stays JSON)."""
    from pydantic import TypeAdapter

    hints = _hints(fn)
    out: dict[int, tuple[str, TypeAdapter[Any]]] = {}
    for i, p in enumerate(list(inspect.signature(fn).parameters.values())[1:]):
        if p.kind not in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD):
            break  # *args and what follows: passed as the journal holds them
        if _structured(hints.get(p.name)):
            try:
                out[i] = (p.name, TypeAdapter(hints[p.name]))
            except Exception as exc:  # e.g. typing.TypedDict before Python 3.12
                log.warning("parameter %s of %s is passed as JSON: %s", p.name, getattr(fn, "__qualname__", fn), exc)
    return out


def output_adapter(fn: Callable[..., Any]) -> TypeAdapter[Any] | None:
    """The adapter of the return annotation, or None when there is none (or it is Any)."""
    from pydantic import TypeAdapter

    hints = _hints(fn)
    if "return" not in hints or hints["return"] is Any:
        return None
    ret = hints["return"]
    try:
        return TypeAdapter(type(None) if ret is None else ret)
    except Exception as exc:  # an annotation pydantic cannot check (typing.TypedDict before 3.12)
        log.warning("the return annotation of %s is not checked: %s", getattr(fn, "__qualname__", fn), exc)
        return None


def validation_error() -> type[ValidationError]:
    """pydantic's ValidationError, for ``except validation_error() as exc``: an except clause
    evaluates its class only when something was raised, so a check that passes imports nothing."""
    from pydantic import ValidationError

    return ValidationError


def problems(exc: ValidationError, root: str = "") -> list[str]:
    """One sentence per bad field: ``bucket: Input should be a valid string``."""
    out = []
    for err in exc.errors():
        loc = ".".join(str(x) for x in err.get("loc", ()))
        where = f"{root}.{loc}" if root and loc else (loc or root or "the value")
        kind = err.get("type")
        if kind == "missing":
            out.append(f"{where} is required")
        elif kind == "extra_forbidden":
            out.append(f"{where} is not a parameter")
        else:
            out.append(f"{where}: {err.get('msg', 'is not valid')}")
    return out
