"""A DAG laid out on the server and drawn as SVG: the stages of a pipeline, the layers of a
composition. The layout (where each node goes) depends on the nodes and their edges only, so it
is cached by the digest of those; a node's status only colours it. Past ``MAX_NODES`` nothing is
laid out: the page asks for a subset instead of sending a drawing no browser opens quickly."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass

from markupsafe import Markup, escape

from ._tones import tone

MAX_NODES = 300
"""The most nodes one drawing holds."""
WIDTH, HEIGHT, GAP_X, GAP_Y, PAD = 168, 44, 56, 14, 8
NAME_CHARS = 20
_CACHED = 256


@dataclass(frozen=True)
class Node:
    name: str
    after: tuple[str, ...] = ()
    """The names of the nodes this one depends on (an edge from each to this one)."""
    status: str = ""
    label: str = ""
    """What the node says under its name (its status when empty)."""


@dataclass(frozen=True)
class Layout:
    digest: str
    place: dict[str, tuple[int, int]]
    """Each node's column and row."""
    width: int
    height: int


class TooLarge(ValueError):
    def __init__(self, count: int):
        super().__init__(f"{count} nodes: the graph draws at most {MAX_NODES}; narrow the stages shown")
        self.count = count


_layouts: dict[str, Layout] = {}


def shape_digest(nodes: Sequence[Node]) -> str:
    """The content hash of a graph's shape: its nodes' names and edges, in order."""
    shape = [[n.name, list(n.after)] for n in nodes]
    return hashlib.sha256(json.dumps(shape, separators=(",", ":")).encode()).hexdigest()[:16]


def layout(nodes: Sequence[Node]) -> Layout:
    """Columns by longest path from a root (a node goes right of everything it depends on), rows
    in declaration order within a column. Unknown dependencies are ignored; a cycle cannot be
    declared (the pipelines refuse one), and would only put its nodes in column 0."""
    if len(nodes) > MAX_NODES:
        raise TooLarge(len(nodes))
    key = shape_digest(nodes)
    cached = _layouts.get(key)
    if cached is not None:
        return cached
    by_name = {n.name: n for n in nodes}
    column: dict[str, int] = {}

    def col(name: str, seen: frozenset[str]) -> int:
        if name in column:
            return column[name]
        deps = [d for d in by_name[name].after if d in by_name and d not in seen]
        c = 1 + max((col(d, seen | {name}) for d in deps), default=-1)
        column[name] = c
        return c

    rows: dict[int, int] = {}
    place: dict[str, tuple[int, int]] = {}
    for n in nodes:
        c = col(n.name, frozenset())
        place[n.name] = (c, rows.get(c, 0))
        rows[c] = rows.get(c, 0) + 1
    columns = 1 + max(rows, default=0)
    height = max(rows.values(), default=1)
    made = Layout(key, place, columns * (WIDTH + GAP_X) - GAP_X + 2 * PAD, height * (HEIGHT + GAP_Y) - GAP_Y + 2 * PAD)
    if len(_layouts) >= _CACHED:
        _layouts.clear()
    _layouts[key] = made
    return made


def _xy(place: tuple[int, int]) -> tuple[int, int]:
    return PAD + place[0] * (WIDTH + GAP_X), PAD + place[1] * (HEIGHT + GAP_Y)


def svg(nodes: Sequence[Node], title: str) -> Markup:
    """The drawing: one group per node (role img, named "NAME: STATUS" for assistive technology
    and tests), a line per edge; everything put in is escaped."""
    lay = layout(nodes)
    parts = [f'<svg class="dag" role="group" aria-label="{escape(title)}" data-layout="{lay.digest}" '
             f'viewBox="0 0 {lay.width} {lay.height}" width="{lay.width}" height="{lay.height}">']
    for n in nodes:
        x2, y2 = _xy(lay.place[n.name])
        for dep in n.after:
            if dep in lay.place:
                x1, y1 = _xy(lay.place[dep])
                parts.append(f'<path class="edge" d="M{x1 + WIDTH},{y1 + HEIGHT // 2} C{x1 + WIDTH + GAP_X // 2},'
                             f'{y1 + HEIGHT // 2} {x2 - GAP_X // 2},{y2 + HEIGHT // 2} {x2},{y2 + HEIGHT // 2}"/>')
    for n in nodes:
        x, y = _xy(lay.place[n.name])
        name = n.name if len(n.name) <= NAME_CHARS else n.name[:NAME_CHARS - 1] + "…"
        status = n.status or "unknown"
        parts.append(
            f'<g class="node tone-{tone(status)}" role="img" aria-label="{escape(n.name)}: {escape(status)}" '
            f'data-node="{escape(n.name)}"><title>{escape(n.name)}: {escape(status)}</title>'
            f'<rect x="{x}" y="{y}" width="{WIDTH}" height="{HEIGHT}" rx="6"/>'
            f'<text x="{x + 10}" y="{y + 18}" class="name">{escape(name)}</text>'
            f'<text x="{x + 10}" y="{y + 35}" class="state">{escape(n.label or status)}</text></g>')
    parts.append("</svg>")
    return Markup("".join(parts))


def layered(steps: Sequence[tuple[str, str, str]]) -> list[Node]:
    """The nodes of a layered DAG (a composition): (name, layer, status) in layer order; each step
    depends on every step of the layer before its own."""
    nodes: list[Node] = []
    previous: tuple[str, ...] = ()
    current: list[str] = []
    layer = None
    for name, in_layer, status in steps:
        if in_layer != layer:
            previous, current, layer = (tuple(current) if layer is not None else ()), [], in_layer
        nodes.append(Node(name, previous, status))
        current.append(name)
    return nodes
