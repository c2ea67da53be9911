"""Queue-scope commands: ``status``, ``pause``, ``resume``, ``drain``, ``obliterate``."""

from __future__ import annotations

import argparse
import json
from typing import TYPE_CHECKING

from .. import admin
from .._redis.connection import Connection
from ..config import parse_url
from ..errors import NotPaused
from .common import DONE, Commands, positive_int, url_of

if TYPE_CHECKING:
    from rich.console import Console

__all__ = ["register"]

BUDGET_HELP = f"jobs deleted per call, 1..{admin.MAX_BUDGET} (default %(default)s)"


def _budget(text: str) -> int:
    value = positive_int(text)
    if value > admin.MAX_BUDGET:
        raise argparse.ArgumentTypeError(f"at most {admin.MAX_BUDGET} jobs per call: {text!r}")
    return value


async def cmd_status(conn: Connection, args: argparse.Namespace, out: Console) -> int:
    from rich.table import Table

    queues = [args.queue] if args.queue else await admin.list_queues(conn)
    rows = [await admin.stats(conn, q) for q in queues]
    if args.json:
        out.print_json(
            json.dumps(
                [
                    {
                        "queue": s.queue,
                        "paused": s.paused,
                        "pending": s.pending,
                        "scheduled": s.scheduled,
                        "active": s.active,
                        "dead": s.dead,
                        "completed": s.completed,
                        "completed_total": s.completed_total,
                        "failed_total": s.failed_total,
                        "completed_last_minute": s.completed_last_minute,
                    }
                    for s in rows
                ]
            )
        )
        return DONE
    where = parse_url(url_of(args)).display
    if not rows:
        out.print(f"no queues at {where}")
        return DONE
    table = Table(title=f"echomq at {where}")
    table.add_column("queue")
    table.add_column("state")
    for name in ("pending", "scheduled", "active", "dead", "completed"):
        table.add_column(name, justify="right")
    table.add_column("done (total)", justify="right")
    table.add_column("failed (total)", justify="right")
    table.add_column("done/min", justify="right")
    for s in rows:
        table.add_row(
            s.queue,
            "[yellow]paused[/]" if s.paused else "[green]running[/]",
            str(s.pending),
            str(s.scheduled),
            str(s.active),
            f"[red]{s.dead}[/]" if s.dead else "0",
            str(s.completed),
            str(s.completed_total),
            str(s.failed_total),
            str(s.completed_last_minute),
        )
    out.print(table)
    return DONE


async def cmd_pause(conn: Connection, args: argparse.Namespace, out: Console) -> int:
    await admin.pause(conn, args.queue)
    out.print(f"queue {args.queue} paused")
    return DONE


async def cmd_resume(conn: Connection, args: argparse.Namespace, out: Console) -> int:
    await admin.resume(conn, args.queue)
    out.print(f"queue {args.queue} resumed")
    return DONE


async def cmd_drain(conn: Connection, args: argparse.Namespace, out: Console) -> int:
    from rich.markup import escape
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

    before = await admin.stats(conn, args.queue)
    waiting = before.pending + (before.scheduled if args.include_schedule else 0)
    with Progress(
        TextColumn(f"draining {escape(args.queue)}"),
        BarColumn(),
        MofNCompleteColumn(),
        console=out,
        transient=not out.is_terminal,
        disable=not out.is_terminal,
    ) as bar:
        task = bar.add_task("drain", total=max(waiting, 1))

        def advance(deleted: int, remaining: int) -> None:
            bar.update(task, completed=deleted, total=max(deleted + remaining, 1))

        n = await admin.drain(
            conn,
            args.queue,
            include_schedule=args.include_schedule,
            budget=args.budget,
            on_progress=advance,
        )
    what = "pending and scheduled" if args.include_schedule else "pending"
    out.print(f"drained {n} {what} job(s) from {args.queue}")
    return DONE


async def cmd_obliterate(conn: Connection, args: argparse.Namespace, out: Console) -> int:
    from rich.markup import escape
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

    before = await admin.stats(conn, args.queue)
    if not before.paused:  # the verb refuses too; this avoids drawing a bar first
        raise NotPaused(args.queue)
    total = max(before.jobs, 1)
    with Progress(
        TextColumn(f"obliterating {escape(args.queue)}"),
        BarColumn(),
        MofNCompleteColumn(),
        console=out,
        transient=not out.is_terminal,
        disable=not out.is_terminal,
    ) as bar:
        task = bar.add_task("obliterate", total=total)

        def advance(deleted: int) -> None:
            bar.update(task, completed=min(deleted, total))

        deleted = await admin.obliterate_all(
            conn, args.queue, force=args.force, budget=args.budget, on_progress=advance
        )
        bar.update(task, completed=total)
    out.print(f"obliterated {args.queue}: {deleted} jobs and keys deleted, none left")
    return DONE


def register(commands: Commands) -> None:
    p = commands.add("status", "counts per state, the pause gate and throughput", run=cmd_status)
    p.add_argument("queue", nargs="?", help="one queue (default: every queue found)")
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")

    commands.add(
        "pause", "stop claiming on a queue (workers and claims alike)",
        queue="positional", run=cmd_pause,
    )  # fmt: skip
    commands.add("resume", "claim again, and wake idle workers", queue="positional", run=cmd_resume)

    p = commands.add(
        "drain", "delete the pending backlog (active jobs stay)", queue="positional", run=cmd_drain
    )
    p.add_argument("--include-schedule", action="store_true", help="drain scheduled jobs too")
    p.add_argument("--budget", type=_budget, default=admin.DEFAULT_BUDGET, help=BUDGET_HELP)

    p = commands.add(
        "obliterate", "delete a paused queue and every key of it",
        queue="positional", run=cmd_obliterate,
    )  # fmt: skip
    p.add_argument("--force", action="store_true", help="delete jobs in flight too")
    p.add_argument("--budget", type=_budget, default=admin.DEFAULT_BUDGET, help=BUDGET_HELP)
