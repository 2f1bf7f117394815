"""Charts drawn on the server as SVG (no script, no library, nothing from another site): the
overview's runs per interval, stacked by how they ended with a line of those started, and a
sparkline per name. Every figure a chart draws is also in a table beside it (a chart is a
picture of the table, not the only way to read it); each bar carries a ``<title>`` that a
pointer shows. Tones are the stylesheet's classes, never inline styles (the page's CSP)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from markupsafe import Markup, escape

ENDED = (("completed", "ok"), ("failed", "bad"), ("cancelled", "idle"))
"""How a run ended, bottom to top of a stacked bar, with the tone each is drawn in."""


@dataclass
class Interval:
    """One interval of a chart: its label (when it starts), how many runs started in it and how
    many ended in it, by how they ended."""

    label: str
    started: int
    ended: dict[str, int]


def _top(intervals: Sequence[Interval]) -> int:
    return max([1, *(max(i.started, sum(i.ended.values())) for i in intervals)])


def activity(intervals: Sequence[Interval], title: str, *, width: int = 720, height: int = 180) -> Markup:
    """Bars of the runs ended per interval (stacked: completed, failed, cancelled) and a line of
    the runs started, with the largest count on the axis and the first and last labels."""
    pad_left, pad_bottom, pad_top = 36, 22, 8
    plot_w, plot_h = width - pad_left - 4, height - pad_bottom - pad_top
    top = _top(intervals)
    step = plot_w / max(1, len(intervals))
    bar = max(1.0, step * 0.7)
    parts = [f'<svg class="chart" viewBox="0 0 {width} {height}" role="img" aria-label="{escape(title)}"'
             ' preserveAspectRatio="xMinYMin meet">',
             f'<line class="axis" x1="{pad_left}" y1="{pad_top + plot_h}" x2="{width - 4}" y2="{pad_top + plot_h}"/>',
             f'<text class="tick" x="{pad_left - 4}" y="{pad_top + 10}" text-anchor="end">{top}</text>',
             f'<text class="tick" x="{pad_left - 4}" y="{pad_top + plot_h}" text-anchor="end">0</text>']
    points: list[tuple[float, float]] = []
    for n, i in enumerate(intervals):
        x = pad_left + n * step + (step - bar) / 2
        y = float(pad_top + plot_h)
        for what, tone in ENDED:
            count = i.ended.get(what, 0)
            if count:
                h = plot_h * count / top
                y -= h
                parts.append(f'<rect class="bar tone-{tone}" x="{x:.1f}" y="{y:.1f}" width="{bar:.1f}" height="{h:.1f}">'
                             f'<title>{escape(i.label)}: {count} {what}</title></rect>')
        points.append((pad_left + n * step + step / 2, pad_top + plot_h - plot_h * i.started / top))
    if points:
        parts.append(f'<polyline class="started" points="{" ".join(f"{px:.1f},{py:.1f}" for px, py in points)}"/>')
        for (px, py), i in zip(points, intervals, strict=True):
            parts.append(f'<circle class="started" cx="{px:.1f}" cy="{py:.1f}" r="2.5"><title>{escape(i.label)}:'
                         f' {i.started} started</title></circle>')
        parts.append(f'<text class="tick" x="{pad_left}" y="{height - 6}">{escape(intervals[0].label)}</text>')
        parts.append(f'<text class="tick" x="{width - 4}" y="{height - 6}" text-anchor="end">'
                     f'{escape(intervals[-1].label)}</text>')
    parts.append("</svg>")
    return Markup("".join(parts))


def sparkline(intervals: Sequence[Interval], title: str, *, width: int = 160, height: int = 28) -> Markup:
    """A name's runs per interval in a row of a table: bars of those ended (failed ones on top, in
    their tone), no axis."""
    top = _top(intervals)
    step = width / max(1, len(intervals))
    parts = [f'<svg class="spark" viewBox="0 0 {width} {height}" width="{width}" height="{height}" role="img"'
             f' aria-label="{escape(title)}">']
    for n, i in enumerate(intervals):
        y = float(height)
        for what, tone in ENDED:
            count = i.ended.get(what, 0)
            if count:
                h = (height - 2) * count / top
                y -= h
                parts.append(f'<rect class="bar tone-{tone}" x="{n * step:.1f}" y="{y:.1f}"'
                             f' width="{max(1.0, step - 1):.1f}" height="{h:.1f}"/>')
    parts.append("</svg>")
    return Markup("".join(parts))
