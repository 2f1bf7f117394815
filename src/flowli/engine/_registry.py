"""The registry of workflows: names and versions, side by side."""

from __future__ import annotations

import functools
import inspect
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Callable, TypeVar

from flowli.domain import (
    ArgumentsInvalid,
    RegistrationError,
    TypeMetadata,
    UnknownWorkflowError,
    WorkflowArgumentsError,
    custom_role,
    type_metadata,
)

from ._decider import Decide, Decider, Evolve, check
from ._typing import output_adapter, problems, structured_parameters, validation_error

F = TypeVar("F", bound=Callable[..., Any])
E = TypeVar("E", bound=type)
_ATTR = "__flowli_workflow__"


@dataclass(frozen=True)
class WorkflowDef:
    name: str
    version: str
    fn: Callable[..., Any]
    meta: TypeMetadata = field(default_factory=TypeMetadata, compare=False)
    """The catalog metadata declared at registration (kind, featured, scope, permissions, ...)."""

    @property
    def ref(self) -> str:
        return f"{self.fn.__module__}:{self.fn.__qualname__}"

    @functools.cached_property
    def signature(self) -> inspect.Signature:
        return inspect.signature(self.fn)

    def bind(self, args: tuple[Any, ...] | list[Any]) -> None:
        """Check that ``args`` fit the signature (after the context)."""
        try:
            self.signature.bind(None, *args)
        except TypeError as exc:
            raise WorkflowArgumentsError(self.name, f"{exc}; it takes {self.name}({self.parameters})") from None

    @functools.cached_property
    def output(self) -> Any:
        """The pydantic adapter of the return annotation (None without one): the output schema; the
        result of a type registered with catalog metadata is checked against it before it is
        accepted, and dumped as JSON (a model becomes its fields)."""
        return output_adapter(self.fn)

    @functools.cached_property
    def typed(self) -> dict[int, tuple[str, Any]]:
        """For a type registered with catalog metadata: the pydantic adapter of each positional
        parameter annotated with a model, a dataclass or a TypedDict, by its position among the
        arguments (after the context). Those arguments reach the function as their types; every
        other one as the journal holds it. Empty for any other workflow."""
        return structured_parameters(self.fn) if self.meta.declared else {}

    def arguments(self, args: list[Any], typed: bool) -> list[Any]:
        """The arguments the function is called with: the journal's JSON arguments, those of the
        structured parameters (see ``typed``) as instances of their types when the execution was
        started so (``typed``, recorded in its started entry: an execution started before its
        workflow was typed replays with what it was given). ArgumentsInvalid, naming each bad field,
        when one does not fit."""
        adapters = self.typed if typed else None
        if not adapters:
            return args
        out, bad = list(args), []
        for i, (name, adapter) in adapters.items():
            if i < len(out):
                try:
                    out[i] = adapter.validate_python(out[i])
                except validation_error() as exc:
                    bad += problems(exc, name)
                except Exception as exc:  # a validator that raised
                    bad.append(f"{name}: {type(exc).__name__}: {exc}")
        if bad:
            raise ArgumentsInvalid(self.name, bad)
        return out

    @functools.cached_property
    def parameters(self) -> str:
        """The parameters after the context, as the code declares them: ``invoice_id: str, amount: float``."""
        shown = []
        for p in list(self.signature.parameters.values())[1:]:
            text = p.name if p.kind is not p.VAR_POSITIONAL else f"*{p.name}"
            if p.kind is p.VAR_KEYWORD:
                text = f"**{p.name}"
            if p.annotation is not p.empty:
                ann = p.annotation if isinstance(p.annotation, str) else getattr(p.annotation, "__name__", repr(p.annotation))
                text += f": {ann}"
            if p.default is not p.empty:
                text += f" = {p.default!r}"
            shown.append(text)
        return ", ".join(shown)


def _version_key(version: str) -> tuple[Any, ...]:
    return tuple((0, int(p)) if p.isdigit() else (1, p) for p in re.split(r"[.\-]", version))


class Registry:
    """Workflows by name and version. Several versions of one name live side by side; an
    execution keeps the version it started with, and a start without a version takes the
    highest one."""

    def __init__(self) -> None:
        self._defs: dict[str, dict[str, WorkflowDef]] = {}
        self._errors: dict[tuple[str, str], type[Exception]] = {}
        self._deciders: dict[str, dict[str, Decider]] = {}
        self.roles: dict[str, frozenset[str]] = {}
        """The application's custom roles (``role``), by name."""

    def error(self, cls: E) -> E:
        """Declare an exception type of the application's own, so that ``engine.result`` raises
        it again as itself when an execution ends with it (use as a class decorator). Undeclared
        types come back as ``ExecutionFailed`` with their name and message: stored error data
        never makes flowli import a module."""
        if not (isinstance(cls, type) and issubclass(cls, Exception)):
            raise RegistrationError(f"registry.error takes an Exception subclass, got {cls!r}")
        self._errors[(cls.__module__, cls.__name__)] = cls
        return cls

    def role(self, name: str, capabilities: Iterable[str]) -> None:
        """Declare a custom role of the application: the capabilities it grants (``runs:read``,
        ``runs:start``, ``runs:operate``, ``catalog:write``, a type's declared permission such as
        ``s3:write``). Every process that loads this registry knows it: an API key or a dashboard
        user may be given it (``flowli keys create APP --role NAME``), and every entry point checks
        it as it checks a built-in role. RegistrationError for a bad name or capability."""
        try:
            declared, caps = custom_role(name, capabilities)
        except ValueError as exc:
            raise RegistrationError(str(exc)) from None
        self.roles[declared] = caps

    def declared_error(self, module: str, name: str) -> type[Exception] | None:
        return self._errors.get((module, name))

    def workflow(self, name: str | None = None, *, version: str = "1", **metadata: Any) -> Callable[[F], F]:
        """Register an async workflow function under ``name`` and ``version``. The keywords are its
        catalog metadata: ``kind`` (state_machine, data, dag), ``featured``, ``scope``
        (organization, library, none), ``read_only``, ``permissions``, ``prerequisites``,
        ``description``, ``compensate`` (the type that undoes it in a denied dag)."""
        def register(fn: F) -> F:
            self.add(fn, name, version=version, **metadata)
            return fn

        return register

    def add(self, fn: Callable[..., Any], name: str | None = None, *, version: str = "1",
            **metadata: Any) -> WorkflowDef:
        wf_name = name or getattr(fn, "__name__", None)
        if not wf_name:
            raise RegistrationError(f"workflow {fn!r} needs a name")
        if not inspect.iscoroutinefunction(fn):
            raise RegistrationError(
                f"workflow {wf_name!r} version {version!r}: {getattr(fn, '__qualname__', fn)!r} is not an async"
                " function; write it as `async def`"
            )
        if not isinstance(version, str) or not version:
            raise RegistrationError(f"workflow {wf_name!r}: version must be a non-empty string, got {version!r}")
        meta = type_metadata(wf_name, version, metadata)
        if version in self._deciders.get(wf_name, {}):
            raise RegistrationError(f"workflow {wf_name!r} version {version!r}: a decider has that name and version"
                                    " already")
        versions = self._defs.setdefault(wf_name, {})
        if version in versions:
            raise RegistrationError(
                f"workflow {wf_name!r} version {version!r} is registered already"
                f" (by {versions[version].ref}); give the new code another version"
            )
        wf = WorkflowDef(wf_name, version, fn, meta)
        versions[version] = wf
        setattr(fn, _ATTR, wf)
        return wf

    def decider(self, name: str, *, version: str = "1", initial: Any, evolve: Evolve,
                index: Callable[[Any], Any] | None = None, shares: bool = False) -> Callable[[Decide], Decider]:
        """Register ``decide(state, command) -> (events, effects)`` as the decider ``name`` of
        ``version``, with ``evolve(state, event) -> state`` and the ``initial`` state (JSON).
        Its executions start as a workflow's (``engine.start(name, input)``) but are never
        replayed: see ``flowli.engine.Decider`` (and its ``shares``). Returns the Decider (which
        ``engine.start`` also takes). ``index(state) -> Index``, when given, is written with each
        state: the read model that ``engine.decided`` lists."""

        def register(decide: Decide) -> Decider:
            return self.add_decider(Decider(name, version, initial, decide, evolve, index, shares))

        return register

    def add_decider(self, decider: Decider) -> Decider:
        check(decider.name, decider.version, decider.initial, decider.decide, decider.evolve)
        if decider.version in self._defs.get(decider.name, {}):
            raise RegistrationError(f"decider {decider.name!r} version {decider.version!r}: a workflow has that name"
                                    " and version already")
        versions = self._deciders.setdefault(decider.name, {})
        if decider.version in versions:
            raise RegistrationError(f"decider {decider.name!r} version {decider.version!r} is registered already"
                                    f" (by {versions[decider.version].ref}); give the new code another version")
        versions[decider.version] = decider
        return decider

    def decider_of(self, name: str | Any, version: str | None = None) -> Decider | None:
        """The decider ``name`` (the highest version when ``version`` is None), or None when
        ``name`` is not a decider's (a workflow's, or unknown). UnknownWorkflowError for a
        decider's name with a version it lacks. A name may have workflow versions and decider
        versions (a workflow's code became a decider: its older executions finish as they began):
        a workflow's version is None here, and without a version the highest version of the name
        tells which one a start gets."""
        if isinstance(name, Decider):
            version, name = version or name.version, name.name
        versions = self._deciders.get(name) if isinstance(name, str) else None
        if not versions:
            return None
        workflows = self._defs.get(name, {})
        if version is not None and version in workflows:
            return None
        if version is None:
            newest = max(versions, key=_version_key)
            if workflows and _version_key(max(workflows, key=_version_key)) > _version_key(newest):
                return None
            return versions[newest]
        if version not in versions:
            if version in self._defs.get(name, {}):
                return None
            raise UnknownWorkflowError(name, version, [f"{name}@{v}" for v in versions])
        return versions[version]

    @property
    def has_deciders(self) -> bool:
        """Whether any decider is registered: a signal then reads the record it goes to, to tell."""
        return bool(self._deciders)

    def get(self, workflow: str | Callable[..., Any], version: str | None = None) -> WorkflowDef:
        if callable(workflow):
            wf = getattr(workflow, _ATTR, None)
            if wf is None:
                raise UnknownWorkflowError(getattr(workflow, "__qualname__", repr(workflow)), version, self.names())
            name = wf.name
            version = version or wf.version
        else:
            name = workflow
        versions = self._defs.get(name)
        if not versions:
            raise UnknownWorkflowError(name, version, self.names())
        if version is None:
            return versions[max(versions, key=_version_key)]
        if version not in versions:
            raise UnknownWorkflowError(name, version, [f"{name}@{v}" for v in versions])
        return versions[version]

    def names(self) -> list[str]:
        """The workflows' names (deciders are ``decider_names``)."""
        return sorted(self._defs)

    def decider_names(self) -> list[str]:
        return sorted(self._deciders)

    def versions(self, name: str) -> list[str]:
        return sorted(self._defs.get(name, {}), key=_version_key)

    def __iter__(self) -> Any:
        for versions in self._defs.values():
            yield from versions.values()
