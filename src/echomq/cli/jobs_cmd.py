"""``echomq jobs QUEUE --state STATE``: the ids a state holds, newest first, with their
task, the time that tells the state, and (dead jobs) the error: the ids ``explain``,
``reprocess`` and ``remove`` take. The read is ``admin.list_jobs``."""

from __future__ import annotations

import argparse
import json
from typing import TYPE_CHECKING, Any

from .. import admin
from .._wire.connection import Connection
from .common import DONE, Commands, positive_int
from .explain_text import span

if TYPE_CHECKING:
    from rich.console import Console

__all__ = ["register"]

#: the header of the time column, per state (``JobRow.when_ms`` says which time it is)
WHEN = {
    "pending": "enqueued",
    "waiting": "waiting since",
    "scheduled": "due",
    "active": "claimed",
    "dead": "died",
    "completed": "finished",
}
ERROR_CHARS = 120  # of a dead job's error shown (its first line); --json has it whole


def _limit(text: str) -> int:
    value = positive_int(text)
    if value > admin.MAX_VIEW:
        raise argparse.ArgumentTypeError(f"at most {admin.MAX_VIEW} jobs per call: {text!r}")
    return value


def _ago(ms: int | None, now_ms: int) -> str:
    if ms is None:
        return "-"
    delta = ms - now_ms
    return f"in {span(delta)}" if delta > 0 else f"{span(delta)} ago"


def _error(text: str | None) -> str:
    if not text:
        return "-"
    first = text.strip().splitlines()[0] if text.strip() else text
    more = len(first) > ERROR_CHARS or first != text.strip()
    return first[:ERROR_CHARS] + (" [...]" if more else "")


def _as_json(row: admin.JobRow) -> dict[str, Any]:
    return {
        "id": row.id,
        "state": row.state,
        "task": row.task,
        "when_ms": row.when_ms,
        "score": row.score,
        "created_at": row.created_at_ms,
        "claimed_at": row.claimed_at_ms,
        "finished_at": row.finished_at_ms,
        "failures": row.failures,
        "error": row.last_error,
        "expired": row.expired,
    }


async def cmd_jobs(conn: Connection, args: argparse.Namespace, out: Console) -> int:
    from rich import box
    from rich.markup import escape
    from rich.table import Table

    page = await admin.list_jobs(
        conn, args.queue, args.state, task=args.task, group=args.group, limit=args.limit,
        oldest=args.oldest,
    )  # fmt: skip
    if args.json:
        out.print_json(
            json.dumps(
                {
                    "jobs": [_as_json(r) for r in page.rows],
                    "total": page.total,
                    "complete": page.complete,
                }
            )
        )
        return DONE
    where = f"group {args.group}'s lane of {args.queue}" if args.group else args.queue
    which = f"{args.state} jobs of task {args.task}" if args.task else f"{args.state} jobs"
    if not page.rows:
        out.print(f"no {escape(which)} in {escape(where)}")
    else:
        now_ms = await admin.server_now_ms(conn)
        order = "oldest first" if args.oldest else "newest first"
        title = f"{which} of {where}, {order}"
        table = Table(
            title=escape(title), box=box.SIMPLE_HEAD, show_edge=False, min_width=len(title)
        )
        widest = max(len(r.id) for r in page.rows)
        table.add_column("id", overflow="fold", min_width=min(32, widest))
        table.add_column(WHEN[args.state], overflow="fold")
        dead = args.state == "dead"
        # a dead job's error goes under its task, in the one column that may be narrow
        table.add_column("task, error" if dead else "task", overflow="fold")
        for r in page.rows:
            task = escape(r.task or "-")
            if dead and r.expired:
                task += "\n[yellow]expired: not started by its deadline[/]"
            elif dead:
                task += f"\n[red]{escape(_error(r.last_error))}[/]"
            table.add_row(escape(r.id), _ago(r.when_ms, now_ms), task)
        out.print(table)
    shown = len(page.rows)
    if not page.complete:
        looked = f"looked at {page.examined:,} of the {page.total:,}; " if args.task else ""
        out.print(
            f"{shown:,} shown, {page.total:,} {args.state} in all: {looked}--limit N shows "
            f"more (at most {admin.MAX_VIEW:,}), --oldest the other end"
        )
    if args.state == "pending" and not args.group:
        grouped = (await admin.stats(conn, args.queue, minutes=1)).grouped
        if grouped:
            out.print(
                f"and {grouped:,} pending jobs wait in group lanes: `echomq groups "
                f"{args.queue}` lists the groups, --group NAME one lane"
            )
    return DONE


def register(commands: Commands) -> None:
    p = commands.add(
        "jobs",
        "list the ids a state holds (newest first), with their task, time and error",
        queue="positional",
        run=cmd_jobs,
    )
    p.add_argument("--state", required=True, choices=admin.JOB_STATES, help="the state to list")
    p.add_argument("--task", help="only jobs of this task (the row's task name)")
    p.add_argument("--group", help="pending jobs of this group (they wait in its lane)")
    p.add_argument(
        "--limit", type=_limit, default=20,
        help=f"jobs listed, 1..{admin.MAX_VIEW} (default %(default)s)",
    )  # fmt: skip
    p.add_argument(
        "--oldest", action="store_true",
        help="from the other end (pending: the next to be claimed; scheduled: the soonest due)",
    )  # fmt: skip
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
