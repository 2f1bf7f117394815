"""How the CLI shows executions: the list table, the journal timeline, the execution record.

Renderers build rich renderables from engine values and never read anything themselves, so
``flowli show`` and ``flowli demo`` print one timeline the same way.
"""

from __future__ import annotations

import json
from datetime import datetime, timezone
from typing import Any, Sequence

from rich import box
from rich.console import Console, ConsoleOptions, Group, RenderableType, RenderResult
from rich.table import Table
from rich.text import Text
from rich.tree import Tree

from flowli.domain import Entry, EntryKind, ExecutionRecord, FrameKind, Provenance, Status, redact
from flowli.engine import ExecutionSummary, describe_wait

STATUS_STYLE: dict[Status, str] = {
    Status.PENDING: "cyan",
    Status.RUNNING: "blue",
    Status.SUSPENDED: "yellow",
    Status.COMPLETED: "green",
    Status.FAILED: "red",
    Status.CANCELLED: "magenta",
}

KIND_STYLE: dict[EntryKind, str] = {
    EntryKind.EXECUTION_STARTED: "bold cyan",
    EntryKind.EXECUTION_RESUMED: "bold blue",
    EntryKind.EXECUTION_SUSPENDED: "bold yellow",
    EntryKind.EXECUTION_COMPLETED: "bold green",
    EntryKind.EXECUTION_FAILED: "bold red",
    EntryKind.EXECUTION_CANCELLED: "bold magenta",
    EntryKind.EXECUTION_MIGRATED: "bold cyan",
    EntryKind.CANCEL_REQUESTED: "magenta",
    EntryKind.FRAME_STARTED: "",
    EntryKind.FRAME_COMPLETED: "green",
    EntryKind.FRAME_FAILED: "red",
    EntryKind.ANNOUNCED: "cyan",
}


def status_text(status: Status) -> Text:
    return Text(status.value, style=STATUS_STYLE.get(status, ""))


def clock(at: datetime) -> str:
    """A time of day in UTC, to the millisecond: the journal of one run rarely spans days."""
    return at.astimezone(timezone.utc).strftime("%H:%M:%S.%f")[:-3]


def stamp(at: datetime) -> str:
    return at.astimezone(timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")


def short(value: Any, width: int = 72) -> str:
    """A value as one line of JSON, cut to ``width`` characters, its sensitive values ``***``."""
    try:
        text = json.dumps(redact(value), ensure_ascii=False, default=str)
    except (TypeError, ValueError):
        text = repr(value)
    return text if len(text) <= width else text[: width - 1] + "…"


def channel_name(eid: str, channel: str) -> str:
    """A scoped channel ``{eid}.{name}`` shows as its name; a global one as it is."""
    return channel[len(eid) + 1 :] if channel.startswith(f"{eid}.") else channel


def error_line(error: dict[str, Any] | None) -> str:
    if not error:
        return ""
    etype, message = error.get("type", "Error"), error.get("message", "")
    return f"{etype}: {message}" if message else str(etype)


def describe_entry(e: Entry) -> Text:
    """The value or error of one entry, short, with what matters for its kind."""
    v = e.value
    frame_kind = e.provenance.code.frame_kind
    if e.kind is EntryKind.EXECUTION_STARTED and isinstance(v, dict):
        args = ", ".join(short(a, 40) for a in v.get("args") or [])
        text = f"{v.get('workflow')} v{v.get('version')}({args})"
        if v.get("parent_eid"):
            text += f" child of {v['parent_eid']} {v.get('parent_fid')}"
        return Text(text)
    if e.kind is EntryKind.EXECUTION_RESUMED and isinstance(v, dict):
        return Text(f"epoch {v.get('epoch')}", style="dim")
    if e.kind is EntryKind.EXECUTION_SUSPENDED and isinstance(v, dict):
        if v.get("reason") == "nondeterminism":
            return Text(f"blocked by nondeterminism at {v.get('fid')}: {v.get('detail')}", style="red")
        if v.get("reason"):  # a worker handed the execution back (it stopped, or met an error)
            detail = error_line(e.error)
            return Text(f"handed back: {v['reason']}" + (f" ({detail})" if detail else ""), style="yellow")
        waits = v.get("waits") or []
        return Text("waits for " + "; ".join(describe_wait(e.eid, w) for w in waits) if waits else "waits")
    if e.kind is EntryKind.EXECUTION_COMPLETED:
        return Text("→ " + short(v))
    if e.kind in (EntryKind.EXECUTION_FAILED, EntryKind.EXECUTION_CANCELLED):
        return Text(error_line(e.error), style="red" if e.kind is EntryKind.EXECUTION_FAILED else "magenta")
    if e.kind is EntryKind.EXECUTION_MIGRATED and isinstance(v, dict):
        return Text(f"version {v.get('from')} → {v.get('to')}")
    if e.kind is EntryKind.ANNOUNCED and isinstance(v, dict):
        return Text(f"{v.get('kind')} {short(v.get('data'), 60)}")
    if e.kind is EntryKind.FRAME_STARTED:
        if frame_kind == FrameKind.CHILD.value and isinstance(v, dict):
            return Text(f"child {v.get('child')}")
        if frame_kind == FrameKind.RECEIVE.value and isinstance(v, dict):
            return Text(f"channel {channel_name(e.eid, v.get('channel', '?'))!r}")
        if frame_kind == FrameKind.SLEEP.value and isinstance(v, dict) and v.get("until"):
            return Text(f"until {clock(datetime.fromisoformat(v['until']))}")
        return Text(f"args digest {(e.digest or '')[:12]}", style="dim")
    if e.kind is EntryKind.FRAME_COMPLETED:
        if frame_kind == FrameKind.RECEIVE.value and isinstance(v, dict) and "payload" in v:
            return Text(f"#{v.get('seq')} {short(v['payload'], 48)} from {v.get('by')}")
        if frame_kind == FrameKind.SLEEP.value:
            return Text("woke", style="dim")
        return Text("→ " + short(v))
    if e.kind is EntryKind.FRAME_FAILED:
        text = error_line(e.error)
        if isinstance(v, dict):
            if v.get("retry_at"):
                text += f"; retry at {clock(datetime.fromisoformat(v['retry_at']))}"
            elif v.get("final"):
                text += "; final"
        return Text(text, style="red")
    return Text(short(v) if v is not None else error_line(e.error))


def actor_line(p: Provenance) -> str:
    actor = p.actor
    # a worker's id is host:pid:suffix, and the site column shows host and pid already
    text = f"worker …{actor.id.rsplit(':', 1)[-1]}" if actor.kind == "worker" else str(actor)
    if p.on_behalf_of:
        text += f" for {p.on_behalf_of}"
    return text


def site_line(p: Provenance) -> str:
    site = p.site
    text = f"{site.host}:{site.pid}"
    if site.epoch is not None:
        text += f" e{site.epoch}"
    return text


class Timeline:
    """The journal as a table, one row per entry.

    Lifecycle entries sit at the left margin and frame entries are indented beneath them; a rule
    separates the activations (each ``execution.resumed`` is a new lease), so one can read which
    worker ran which attempt of which frame. On a narrow console the provenance moves under the
    value instead of taking two columns of its own.
    """

    WIDE = 150

    def __init__(self, entries: Sequence[Entry]):
        self.entries = list(entries)

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        yield self.table(wide=options.max_width >= self.WIDE)

    def table(self, wide: bool = True) -> Table:
        table = Table(show_header=True, header_style="bold", box=box.HORIZONTALS, show_edge=False, pad_edge=False,
                      collapse_padding=True)
        table.add_column("seq", justify="right", style="dim", no_wrap=True)
        table.add_column("time (UTC)", no_wrap=True)
        table.add_column("kind", no_wrap=True)
        table.add_column("frame", no_wrap=True)
        table.add_column("att", justify="right", no_wrap=True)
        table.add_column("value / error" if wide else "value / error, provenance", overflow="fold", ratio=1, min_width=24)
        if wide:
            table.add_column("actor", overflow="fold")
            table.add_column("site", no_wrap=True, style="dim")
        for i, e in enumerate(self.entries):
            lifecycle = e.kind.lifecycle
            if e.kind is EntryKind.EXECUTION_RESUMED and i > 0:
                table.add_section()
            kind = Text(e.kind.value if lifecycle else f"  {e.kind.value}", style=KIND_STYLE.get(e.kind, ""))
            frame = Text("" if lifecycle or e.fid is None else f"  {e.fid}", style="" if lifecycle else "bold")
            cells: list[Any] = [
                str(e.seq if e.seq is not None else i + 1), clock(e.at), kind, frame,
                "" if e.attempt is None else str(e.attempt), describe_entry(e),
            ]
            if wide:
                cells += [actor_line(e.provenance), site_line(e.provenance)]
            else:
                cells[-1] = Text.assemble(
                    cells[-1], "\n", (f"{actor_line(e.provenance)} at {site_line(e.provenance)}", "dim")
                )
            table.add_row(*cells)
        return table


def timeline(entries: Sequence[Entry]) -> Timeline:
    return Timeline(entries)


def record_view(record: ExecutionRecord, children: Sequence[ExecutionRecord] = ()) -> Table:
    """The execution record: status, result or error, and what waits on it."""
    grid = Table.grid(padding=(0, 2))
    grid.add_column(style="bold", no_wrap=True)
    grid.add_column(overflow="fold")
    grid.add_row("execution", record.eid)
    grid.add_row("workflow", f"{record.workflow} v{record.version}")
    grid.add_row("status", status_text(record.status))
    if record.status is Status.COMPLETED:
        grid.add_row("result", short(record.result, 400))
    if record.error:
        grid.add_row("error", Text(error_line(record.error), style="red"))
    grid.add_row("queue", record.queue)
    grid.add_row("created", stamp(record.created_at))
    grid.add_row("updated", stamp(record.updated_at))
    if record.key:
        grid.add_row("key", record.key)
    if record.parent_eid:
        grid.add_row("parent", f"{record.parent_eid} {record.parent_fid}")
    if record.cancel_requested and not record.terminal:
        req = record.cancel_requested
        grid.add_row("cancel", f"requested by {req.get('by')} at {req.get('at')}")
    if record.blocked:
        b = record.blocked
        grid.add_row(
            "blocked",
            Text(f"{b.get('reason')} at {b.get('fid')}: {b.get('detail')} (cancel it, or migrate it to another version)",
                 style="red"),
        )
        if "recorded" in b or "current" in b:
            grid.add_row("recorded args", short(b.get("recorded"), 400))
            grid.add_row("current args", short(b.get("current"), 400))
    for child in children:
        grid.add_row("child", Text.assemble(f"{child.eid} {child.workflow} v{child.version} ", status_text(child.status)))
    return grid


def child_eids(entries: Sequence[Entry]) -> list[str]:
    """The eids of the child executions that the journal started, in order."""
    found: list[str] = []
    for e in entries:
        if (
            e.kind is EntryKind.FRAME_STARTED
            and e.provenance.code.frame_kind == FrameKind.CHILD.value
            and isinstance(e.value, dict)
            and e.value.get("child") not in found
        ):
            found.append(e.value["child"])
    return found


def execution_view(record: ExecutionRecord | None, entries: Sequence[Entry], children: Sequence[ExecutionRecord] = ()) -> RenderableType:
    parts: list[RenderableType] = []
    title = Text("journal", style="bold underline")
    if record is not None:
        title.append(f" of {record.workflow} v{record.version} {record.eid}", style="bold")
    parts.append(title)
    parts.append(timeline(entries))
    parts.append(Text(""))
    if record is not None:
        parts.append(record_view(record, children))
    return Group(*parts)


FRAME_STYLE = {"completed": "green", "failed": "red", "retrying": "yellow", "waiting": "yellow", "running": "blue"}


def frames_view(view: Any) -> RenderableType:
    """The frames of a run (``engine.run_view``) as a tree: status, attempts, timing, waits; and
    who holds the lease while one does."""
    tree = Tree(Text.assemble(("frames", "bold underline"), " of ", (view.workflow, "bold"), " ",
                              status_text(Status(view.status))))
    branch, label = tree, None
    for f in view.frames:
        if f.group != label:  # the frames of one pattern, as the workflow wrote it, under its name
            label = f.group
            branch = tree if label is None else tree.add(Text(label, style="bold cyan"))
        line = Text.assemble((f"{f.status:<9}", FRAME_STYLE.get(f.status, "")), " ", (f.fid, "bold"), f"  {f.kind}")
        if len(f.attempts) > 1 or any(a.outcome not in ("completed", "running") for a in f.attempts):
            line.append("  attempts " + ", ".join(f"{a.number} {a.outcome}" for a in f.attempts), style="dim")
        if f.started_at is not None and f.ended_at is not None:
            line.append(f"  {(f.ended_at - f.started_at).total_seconds() * 1000:.0f} ms", style="dim")
        if f.wait is not None:
            line.append("  waits for " + describe_wait(view.eid, f.wait), style="yellow")
        if f.child:
            line.append(f"  child {f.child}", style="dim")
        if f.error:
            line.append("  " + error_line(f.error), style="red")
        branch.add(line)
    if view.lease is not None:
        expires = view.lease.get("expires_at")
        tree.add(Text(f"lease held by {view.lease['owner']} at epoch {view.lease['epoch']}"
                      + (f", expires {stamp(expires)}" if expires else ""), style="blue"))
    return tree


class Executions:
    """The rows of ``flowli ls``; fewer columns on a narrow console, never a cut eid."""

    def __init__(self, rows: Sequence[ExecutionSummary]):
        self.rows = list(rows)

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        yield self.table(options.max_width)

    def table(self, width: int = 200) -> Table:
        created, updated, parent = width >= 120, width >= 90, width >= 160
        table = Table(header_style="bold", box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False, collapse_padding=True)
        table.add_column("eid", no_wrap=True, min_width=36)
        table.add_column("workflow", overflow="fold", ratio=1, min_width=8)
        table.add_column("version", overflow="fold", min_width=7)
        table.add_column("status", no_wrap=True, min_width=9)
        if created:
            table.add_column("created (UTC)", no_wrap=True)
        if updated:
            table.add_column("updated (UTC)", no_wrap=True)
        if parent:
            table.add_column("parent", no_wrap=True, style="dim")
        for r in self.rows:
            state = Text("blocked", style="bold red") if getattr(r, "blocked", None) else status_text(r.status)
            cells: list[Any] = [r.eid, r.workflow, r.version, state]
            if created:
                cells.append(r.created_at.astimezone(timezone.utc).strftime("%Y-%m-%d %H:%M:%S"))
            if updated:
                cells.append(r.updated_at.astimezone(timezone.utc).strftime("%Y-%m-%d %H:%M:%S" if created else "%m-%d %H:%M:%S"))
            if parent:
                cells.append(r.parent_eid or "")
            table.add_row(*cells)
        return table


def executions_table(rows: Sequence[ExecutionSummary]) -> Executions:
    return Executions(rows)


def evidence_view(items: Sequence[Any], bucket: str = "") -> RenderableType:
    """What the steps wrote while they ran, frame by frame and attempt by attempt."""
    table = Table(title="evidence (explains the journal; never authority)", title_justify="left", box=None,
                  pad_edge=False)
    for name in ("frame", "att", "time (UTC)", "level", "event", "fields"):
        table.add_column(name, overflow="fold")
    if not items:
        return Text(f"no evidence in the bucket {bucket or '(none)'}: no step wrote to its attempt log, or the workers"
                    " wrote to another bucket (--bucket, FLOWLI_BUCKET)", style="dim")
    for e in items:
        if e.event is not None:
            ev = dict(e.event)
            at = str(ev.pop("timestamp", ""))[11:23]
            fields = {k: v for k, v in ev.items() if k not in ("event", "level", "eid", "fid", "attempt", "logger")}
            table.add_row(e.fid, str(e.attempt), at, str(ev.get("level", "")), str(ev.get("event", "")), short(fields))
        else:
            table.add_row(e.fid, str(e.attempt), "", "", "attachment", str(e.attachment))
    return Group(Text(f"evidence from {bucket}", style="dim"), table) if bucket else table


def reviews_table(rows: Sequence[Any]) -> RenderableType:
    """The review inbox."""
    if not rows:
        return Text("no review waits for a person", style="dim")
    table = Table(box=box.SIMPLE_HEAD, pad_edge=False)
    for name in ("execution", "subject", "opened (UTC)", "queue", "data", "answer"):
        table.add_column(name, overflow="fold")
    for r in rows:
        answer = "" if r.answer is None else short(r.answer, 40)
        if r.closed_at is not None and r.answer is None:
            answer = "(ended)"
        table.add_row(r.eid, r.subject, stamp(r.opened_at), r.queue, short(r.data, 40), answer)
    return table
