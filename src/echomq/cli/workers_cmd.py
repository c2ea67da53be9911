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
        "counters": dict(w.counters),
    }


async def cmd_workers(conn: Connection, args: argparse.Namespace, out: Console) -> int:
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
    table = Table(title=f"echomq workers at {where}")
    for column in ("queue", "worker", "status", "host", "pid", "version", "held", "done", "failed"):
        table.add_column(column, justify="right" if column in ("pid", "held") else "left")
    table.add_column("started")
    table.add_column("last beat", justify="right")
    for queue, found in listed:
        for w in found.workers:
            status = _status(w, found.now_ms)
            style = "green" if status == "running" else "red" if not w.alive else "yellow"
            table.add_row(
                escape(queue),
                escape(w.id),
                f"[{style}]{escape(status)}[/]",
                escape(w.host or "-"),
                str(w.pid) if w.pid is not None else "-",
                escape(w.version or "-"),
                f"{w.held}/{w.concurrency}" if w.alive else "-",
                str(w.counters.get("completed", 0)) if w.alive else "-",
                str(w.counters.get("failed", 0)) if w.alive else "-",
                utc(w.started_at_ms),
                f"{span(w.silent_ms(found.now_ms))} ago",
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
