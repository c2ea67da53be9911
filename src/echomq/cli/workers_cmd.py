"""``echomq workers [QUEUE]``: the workers serving a queue (or every queue), from their
heartbeat records (docs/runtime.md, "Workers")."""

from __future__ import annotations

import argparse
import json
from typing import TYPE_CHECKING, Any

from .. import admin
from .._wire.connection import Connection
from ..config import parse_url
from .common import DONE, Commands, checked, url_of, utc
from .explain_text import span

if TYPE_CHECKING:
    from rich.console import Console

    from ..admin import WorkerRecord

__all__ = ["register"]


def _status(w: WorkerRecord, now_ms: int) -> str:
    if not w.alive:
        return f"gone (no heartbeat for {span(w.silent_ms(now_ms))})"
    if w.blocked_since_ms is not None:
        return f"blocked {span(now_ms - w.blocked_since_ms)} in {w.blocked_task or '?'}"
    if w.unreachable_ms is not None and w.unreachable_until_ms is not None:
        ago = span(max(0, now_ms - w.unreachable_until_ms))
        return f"running (Redis unreachable from it for {span(w.unreachable_ms)}, {ago} ago)"
    return "running"


def _plain(queue: str, w: WorkerRecord, now_ms: int) -> dict[str, Any]:
    return {
        "queue": queue,
        "id": w.id,
        "alive": w.alive,
        "status": _status(w, now_ms),
        "host": w.host,
        "pid": w.pid,
        "version": w.version,
        "concurrency": w.concurrency,
        "held": w.held,
        "running": list(w.running),
        "started_at_ms": w.started_at_ms,
        "last_beat_ms": w.last_beat_ms,
        "blocked_since_ms": w.blocked_since_ms,
        "blocked_task": w.blocked_task,
        "blocked_job": w.blocked_job,
        "unreachable_ms": w.unreachable_ms,
        "unreachable_until_ms": w.unreachable_until_ms,
        "counters": dict(w.counters),
    }


async def cmd_workers(conn: Connection, args: argparse.Namespace, out: Console) -> int:
    from rich import box
    from rich.markup import escape
    from rich.table import Table

    queues = [args.queue] if args.queue else await admin.list_queues(conn)
    listed = [(q, await admin.list_workers(conn, q)) for q in queues]
    if args.json:
        out.print_json(
            json.dumps([_plain(q, w, found.now_ms) for q, found in listed for w in found.workers])
        )
        return DONE
    where = parse_url(url_of(args)).display
    if not any(found.workers for _, found in listed):
        scope = f"queue {args.queue!r}" if args.queue else "any queue"
        out.print(f"no workers of {escape(scope)} at {where}")
        return DONE
    title = f"echomq workers at {where}"
    table = Table(title=title, box=box.SIMPLE_HEAD, show_edge=False, min_width=len(title))
    many = len(listed) > 1
    table.add_column("worker", overflow="fold")
    if many:
        table.add_column("queue", overflow="fold")
    table.add_column("status", overflow="fold")
    for name in ("held", "done", "failed"):
        table.add_column(name, justify="right", no_wrap=True)
    table.add_column("last beat", justify="right", overflow="fold")
    if args.wide:
        for name in ("host", "pid", "version", "started"):
            table.add_column(name, overflow="fold", justify="right" if name == "pid" else "left")
    for queue, found in listed:
        for w in found.workers:
            status = _status(w, found.now_ms)
            style = "green" if status == "running" else "red" if not w.alive else "yellow"
            cells = [escape(w.id)] + ([escape(queue)] if many else [])
            cells += [
                f"[{style}]{escape(status)}[/]",
                f"{w.held}/{w.concurrency}" if w.alive else "-",
                str(w.counters.get("completed", 0)) if w.alive else "-",
                str(w.counters.get("failed", 0)) if w.alive else "-",
                f"{span(w.silent_ms(found.now_ms))} ago",
            ]
            if args.wide:
                cells += [
                    escape(w.host or "-"),
                    str(w.pid) if w.pid is not None else "-",
                    escape(w.version or "-"),
                    utc(w.started_at_ms),
                ]
            table.add_row(*cells)
    if args.wide:  # as wide as the columns need: a narrow terminal wraps the lines
        from rich.measure import Measurement

        out.width = max(
            out.width, Measurement.get(out, out.options.update_width(10_000), table).maximum
        )
    out.print(table)
    return DONE


def register(commands: Commands) -> None:
    p = commands.add(
        "workers",
        "the workers serving a queue (alive, blocked or gone), from their heartbeats",
        run=checked(cmd_workers),  # an optional queue
    )
    p.add_argument("queue", nargs="?", help="one queue (default: every queue found)")
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    p.add_argument("--wide", action="store_true", help="with host, pid, version and start")
