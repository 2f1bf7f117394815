"""The dashboard's DAG drawing (``Node``, ``layout``, ``layered``, ``svg``, ``TooLarge`` and
``MAX_NODES`` of ``flowli.dashboard``): a node's column is the longest path to it from a root,
rows follow declaration order within a column, a layout is cached by the graph's shape (names and
edges, not statuses), and past the cap nothing is laid out."""

from __future__ import annotations

import re

import pytest

from flowli.dashboard import MAX_NODES, Node, TooLarge, layered, layout, svg

pytestmark = pytest.mark.unit

WIDTH, HEIGHT, GAP_X, GAP_Y, PAD = 168, 44, 56, 14, 8
DIAMOND = [Node("load"), Node("check", ("load",)), Node("ship", ("load",)), Node("bill", ("check", "ship"))]


def test_columns_are_the_longest_path_from_a_root_and_rows_follow_declaration_order():
    assert layout(DIAMOND).place == {"load": (0, 0), "check": (1, 0), "ship": (1, 1), "bill": (2, 0)}
    # c waits for a directly and through b: the longer path decides
    assert layout([Node("a"), Node("b", ("a",)), Node("c", ("a", "b"))]).place == {
        "a": (0, 0), "b": (1, 0), "c": (2, 0)}
    # roots declared apart still share column 0, in their order
    assert layout([Node("a"), Node("z"), Node("b", ("a",)), Node("y"), Node("x", ("z",))]).place == {
        "a": (0, 0), "z": (0, 1), "b": (1, 0), "y": (0, 2), "x": (1, 1)}
    # a node declared before what it depends on still goes right of it
    assert layout([Node("late", ("early",)), Node("early")]).place == {"late": (1, 0), "early": (0, 0)}


def test_unknown_dependencies_are_ignored_and_a_cycle_still_ends():
    assert layout([Node("x", ("ghost",)), Node("y", ("x", "ghost"))]).place == {"x": (0, 0), "y": (1, 0)}
    cyclic = layout([Node("a", ("b",)), Node("b", ("a",))])
    assert set(cyclic.place) == {"a", "b"}


def test_the_size_is_the_columns_and_the_tallest_column():
    diamond = layout(DIAMOND)
    assert (diamond.width, diamond.height) == (3 * (WIDTH + GAP_X) - GAP_X + 2 * PAD,
                                               2 * (HEIGHT + GAP_Y) - GAP_Y + 2 * PAD) == (632, 118)
    single = layout([Node("only")])
    assert (single.width, single.height) == (WIDTH + 2 * PAD, HEIGHT + 2 * PAD)
    wide = layout([Node(f"r{i}") for i in range(4)])
    assert (wide.width, wide.height) == (WIDTH + 2 * PAD, 4 * (HEIGHT + GAP_Y) - GAP_Y + 2 * PAD)


def test_a_layout_is_cached_by_shape_not_by_status_or_label():
    first = layout(DIAMOND)
    assert re.fullmatch(r"[0-9a-f]{16}", first.digest)
    coloured = [Node(n.name, n.after, "Completed", "done · #2") for n in DIAMOND]
    assert layout(coloured) is first
    reordered = [DIAMOND[0], DIAMOND[2], DIAMOND[1], DIAMOND[3]]
    assert layout(reordered).digest != first.digest  # declaration order is part of the shape
    assert layout(reordered).place["ship"] == (1, 0)
    rewired = [*DIAMOND[:3], Node("bill", ("check",))]
    assert layout(rewired).digest != first.digest
    renamed = [*DIAMOND[:3], Node("invoice", ("check", "ship"))]
    assert layout(renamed).digest != first.digest


def test_the_cache_is_bounded_and_a_layout_laid_out_again_is_the_same():
    first = layout(DIAMOND)
    for i in range(300):  # more shapes than the cache keeps
        layout([Node(f"bounded-{i}")])
    again = layout(DIAMOND)
    assert again == first and again is not first


def test_past_the_cap_nothing_is_laid_out_and_the_refusal_says_how_to_narrow():
    assert MAX_NODES == 300
    assert len(layout([Node(f"s{i:03}") for i in range(MAX_NODES)]).place) == MAX_NODES
    with pytest.raises(TooLarge) as refused:
        layout([Node(f"s{i:03}") for i in range(MAX_NODES + 1)])
    assert str(refused.value) == "301 nodes: the graph draws at most 300; narrow the stages shown"
    assert refused.value.count == 301 and isinstance(refused.value, ValueError)
    with pytest.raises(TooLarge):
        svg([Node(f"s{i:03}") for i in range(MAX_NODES + 1)], "too many")


def test_a_layered_dag_depends_on_every_step_of_the_layer_before():
    nodes = layered([("s1", "one", "completed"), ("s2", "one", "running"), ("s3", "two", ""), ("s4", "three", "x")])
    assert nodes == [Node("s1", (), "completed"), Node("s2", (), "running"), Node("s3", ("s1", "s2"), ""),
                     Node("s4", ("s3",), "x")]
    assert layout(nodes).place == {"s1": (0, 0), "s2": (0, 1), "s3": (1, 0), "s4": (2, 0)}
    assert layered([]) == []


def test_the_drawing_names_each_node_and_escapes_what_it_is_given():
    drawing = str(svg([Node('a<b>"&', (), "Running"), Node("a_very_long_stage_name_indeed", ('a<b>"&', "ghost"),
                                                              "", "try #2")], "Stages of <p>"))
    lay = layout([Node('a<b>"&'), Node("a_very_long_stage_name_indeed", ('a<b>"&', "ghost"))])
    assert drawing.startswith(f'<svg class="dag" role="group" aria-label="Stages of &lt;p&gt;"'
                              f' data-layout="{lay.digest}" viewBox="0 0 {lay.width} {lay.height}"')
    assert "<p>" not in drawing and 'a<b>' not in drawing
    assert re.findall(r'role="img" aria-label="([^"]+)"', drawing) == [
        "a&lt;b&gt;&#34;&amp;: Running", "a_very_long_stage_name_indeed: unknown"]
    assert drawing.count('class="edge"') == 1  # the unknown dependency draws nothing
    assert '<text x="242" y="26" class="name">a_very_long_stage_n…</text>' in drawing  # 20 characters shown
    assert '<text x="242" y="43" class="state">try #2</text>' in drawing  # the label, else the status
    assert '<text x="18" y="43" class="state">Running</text>' in drawing
    xs = dict(re.findall(r'data-node="([^"]+)"><title>[^<]*</title><rect x="(\d+)"', drawing))
    assert xs == {"a&lt;b&gt;&#34;&amp;": str(PAD), "a_very_long_stage_name_indeed": str(PAD + WIDTH + GAP_X)}
