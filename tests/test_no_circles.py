"""No circle inside any package: within each package of flowli, its modules (and subpackages)
import one another in one direction only, so each can be read, and changed, with only what lies
below it in mind. (Imports made for type checking alone are not circles: they run nowhere.) The
layers between packages, and inside the engine and the dashboard, are import-linter contracts
(``.importlinter`` in ``pyproject.toml``); this is the rule for every package, the new ones too."""

from __future__ import annotations

import grimp
import pytest

pytestmark = pytest.mark.unit


def circle(modules: list[str], imports: dict[str, set[str]]) -> list[str] | None:
    """A circle among ``modules`` (each importing those of ``imports[m]``), or None."""
    state: dict[str, int] = {}  # 1: on the path, 2: done
    path: list[str] = []

    def visit(m: str) -> list[str] | None:
        state[m] = 1
        path.append(m)
        for n in sorted(imports[m]):
            if state.get(n) == 1:
                return path[path.index(n):] + [n]
            if n not in state:
                found = visit(n)
                if found:
                    return found
        state[m] = 2
        path.pop()
        return None

    for m in modules:
        if m not in state:
            found = visit(m)
            if found:
                return found
    return None


def packages(graph: grimp.ImportGraph) -> list[str]:
    return sorted(m for m in graph.modules if graph.find_children(m))


def test_no_package_of_flowli_has_a_circle_among_its_modules() -> None:
    graph = grimp.build_graph("flowli", include_external_packages=False, exclude_type_checking_imports=True)
    checked = 0
    for package in packages(graph):
        children = sorted(graph.find_children(package))
        imports = {a: {b for b in children if b != a and graph.direct_import_exists(
            importer=a, imported=b, as_packages=True)} for a in children}
        found = circle(children, imports)
        assert found is None, f"a circle in {package}: {' -> '.join(found)}"
        checked += 1
    assert checked >= 10  # flowli and its packages: the rule reached them


def test_the_check_finds_a_circle() -> None:
    assert circle(["a", "b", "c"], {"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert circle(["a", "b", "c"], {"a": {"b"}, "b": {"c"}, "c": set()}) is None
