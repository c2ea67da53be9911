"""``echomq watch``: a queue's active jobs as live progress bars (or one line per event
off a terminal)."""

from __future__ import annotations

import argparse
import datetime as dt
import math
from typing import TYPE_CHECKING, Any

import trio

from .. import admin
from .._wire.connection import Connection
from ..events import Event, open_event_feed
from .common import DONE, Commands, UsageError, url_of

if TYPE_CHECKING:
    from rich.console import Console

__all__ = ["register"]

WATCH_ACTIVE = 200  # active jobs shown when the watch starts
# events after which a job no longer runs: its bar leaves the watch display
_DONE_EVENTS = frozenset(
    {"completed", "cancelled", "dead", "expired", "retrying", "removed", "released", "recovered"}
)


def _percent(progress: Any) -> float | None:
    """A progress value as a percentage, when it reads as one ("42", "0.5" is 0.5 %, "3/4")."""
    text = str(progress).strip().rstrip("%")
    try:
        if "/" in text:
            done, total = (float(x) for x in text.split("/", 1))
            return max(0.0, min(100.0, 100 * done / total)) if total > 0 else None
        value = float(text)
    except ValueError:
        return None
    return max(0.0, min(100.0, value)) if math.isfinite(value) else None


def _event_line(event: Event) -> str:
    stamp = dt.datetime.now().strftime("%H:%M:%S.%f")[:-3]
    extra = " ".join(
        f"{k}={v}" for k, v in sorted(event.fields.items()) if k not in ("event", "job")
    )
    return " ".join(x for x in (stamp, event.event, event.job or "-", extra) if x)


async def cmd_watch(conn: Connection, args: argparse.Namespace, out: Console) -> int:
    if args.duration is not None and args.duration <= 0:
        raise UsageError("--duration must be > 0 seconds")
    if args.count is not None and args.count <= 0:
        raise UsageError("--count must be > 0")
    plain = args.plain or not out.is_terminal
    async with open_event_feed(url_of(args), args.queue) as feed:
        with feed.listen(buffer=4096) as events:
            active = await admin.active_jobs(conn, args.queue, limit=WATCH_ACTIVE)
            progress = {row.id: row.progress for row in active}
            with trio.move_on_after(args.duration if args.duration is not None else math.inf):
                if plain:
                    await _watch_plain(args, events, progress)
                else:
                    await _watch_live(args, out, events, progress)
    return DONE


async def _watch_plain(
    args: argparse.Namespace,
    events: trio.MemoryReceiveChannel[Event],
    progress: dict[str, str | None],
) -> None:
    print(f"watching {args.queue}: {len(progress)} active", flush=True)
    for job, value in progress.items():
        suffix = f" progress={value}" if value is not None else ""
        print(f"active {job}{suffix}", flush=True)
    seen = 0
    async for event in events:
        print(_event_line(event), flush=True)
        seen += 1
        if args.count is not None and seen >= args.count:
            return


async def _watch_live(
    args: argparse.Namespace,
    out: Console,
    events: trio.MemoryReceiveChannel[Event],
    progress: dict[str, str | None],
) -> None:
    from rich.console import Group
    from rich.live import Live
    from rich.markup import escape
    from rich.progress import BarColumn, Progress, TaskID, TextColumn
    from rich.text import Text

    counts = {"completed": 0, "cancelled": 0, "dead": 0, "retrying": 0, "expired": 0}
    bars = Progress(
        TextColumn("{task.description}"), BarColumn(), TextColumn("{task.fields[note]}")
    )
    tasks: dict[str, TaskID] = {}

    class Header:
        def __rich__(self) -> Text:
            return Text.from_markup(
                f"[bold]{escape(args.queue)}[/]  {len(tasks)} active  "
                f"[green]{counts['completed']} completed[/]  "
                f"[magenta]{counts['cancelled']} cancelled[/]  "
                f"[yellow]{counts['retrying']} retrying[/]  [red]{counts['dead']} dead[/]"
                + (f"  [yellow]{counts['expired']} expired[/]" if counts["expired"] else "")
            )

    def show(job: str, value: Any) -> None:
        pct = _percent(value) if value is not None else None
        note = "" if value is None else escape(str(value))
        if job not in tasks:
            tasks[job] = bars.add_task(escape(job), total=100, note=note)
        bars.update(tasks[job], completed=pct or 0, note=note)

    for job, value in progress.items():
        show(job, value)
    seen = 0
    with Live(Group(Header(), bars), console=out, transient=True, refresh_per_second=8) as live:
        async for event in events:
            name, job = event.event, event.job or ""
            if name in ("active", "progress") and job:
                show(job, event.fields.get("progress"))
            elif name in _DONE_EVENTS and job:
                task = tasks.pop(job, None)
                if task is not None:
                    bars.remove_task(task)
                if name in counts:
                    counts[name] += 1
                if name in ("dead", "retrying"):
                    error = event.fields.get("error", "")
                    style = "red" if name == "dead" else "yellow"
                    live.console.print(f"[{style}]{name}[/] {escape(job)} {escape(str(error))}")
            elif name == "cancel" and job:
                live.console.print(f"[magenta]cancel[/] {escape(job)}")
            seen += 1
            if args.count is not None and seen >= args.count:
                return


def register(commands: Commands) -> None:
    p = commands.add(
        "watch", "live progress of a queue's active jobs", queue="positional", run=cmd_watch
    )
    p.add_argument("--duration", type=float, help="stop after this many seconds")
    p.add_argument("--count", type=int, help="stop after this many events")
    p.add_argument("--plain", action="store_true", help="one line per event (default off a tty)")
