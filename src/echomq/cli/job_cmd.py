"""Job-scope commands: ``job``, ``enqueue``, ``remove``, ``reprocess``, ``cancel``,
``explain``."""

from __future__ import annotations

import argparse
import math
from typing import TYPE_CHECKING

from .. import cancel, jobs
from .._model.codec import JSON
from .._wire.connection import Connection
from ..errors import JobGone
from . import explain_text
from .common import DONE, Commands, UsageError, call_args, positive_int, show, utc

if TYPE_CHECKING:
    from rich.console import Console

__all__ = ["register"]


async def cmd_job(conn: Connection, args: argparse.Namespace, out: Console) -> int:
    from rich.markup import escape
    from rich.table import Table

    info = await jobs.get_job(conn, args.queue, args.id)
    if info is None:
        raise JobGone(args.id)
    logs = await jobs.get_job_logs(conn, args.queue, args.id)
    table = Table(title=f"job {escape(args.id)} in {escape(args.queue)}", show_header=False)
    table.add_column("field", style="bold")
    table.add_column("value", overflow="fold")
    for label, value in (
        ("state", str(info.state)),
        ("payload", show(info.payload)),
        ("token", str(info.token)),
        ("failures", f"{info.failures} of {info.max_attempts}"),
        ("stalled", str(info.stalled)),
        ("priority", str(info.priority)),
        ("progress", info.progress or "-"),
        ("last error", info.last_error or "-"),
        ("result", show(info.result)),
        ("created", utc(info.created_at)),
        ("claimed", utc(info.claimed_at)),
        ("run at", utc(info.run_at)),
        ("finished", utc(info.finished_at)),
    ):
        table.add_row(label, escape(value))
    out.print(table)
    out.print(f"logs ({len(logs)}):" if logs else "logs: none")
    for line in logs:
        out.print(f"  {escape(line)}")
    return DONE


async def cmd_enqueue(conn: Connection, args: argparse.Namespace, out: Console) -> int:
    positional, call_kwargs = call_args(args.args)
    if args.kwargs is not None:
        extra = call_args(args.kwargs)[1]
        if not extra:
            raise UsageError("--kwargs must be a JSON object")
        call_kwargs.update(extra)
    if not math.isfinite(args.delay) or args.delay < 0:
        raise UsageError("--delay must be a number of seconds >= 0")
    payload = JSON.encode_call(args.task, positional, call_kwargs)
    job_id = await jobs.enqueue(
        conn,
        args.queue,
        payload,
        job_id=args.job_id,
        delay_ms=round(args.delay * 1000),
        priority=args.priority,
        max_attempts=args.max_attempts,
    )
    out.print(job_id)
    return DONE


async def cmd_remove(conn: Connection, args: argparse.Namespace, out: Console) -> int:
    await jobs.remove_job(conn, args.queue, args.id)
    out.print(f"removed {args.id} from {args.queue}")
    return DONE


async def cmd_reprocess(conn: Connection, args: argparse.Namespace, out: Console) -> int:
    await jobs.reprocess_job(conn, args.queue, args.id)
    out.print(f"reprocessed {args.id}: back in pending on {args.queue}")
    return DONE


async def cmd_cancel(conn: Connection, args: argparse.Namespace, out: Console) -> int:
    outcome = await cancel.request(conn, args.queue, args.id, args.reason, grace=args.grace)
    out.print(f"{outcome} {args.id}")
    return DONE


async def cmd_explain(conn: Connection, args: argparse.Namespace, out: Console) -> int:
    from rich.markup import escape
    from rich.table import Table

    e = await jobs.explain(conn, args.queue, args.id)
    out.print(f"{escape(args.id)}: {escape(explain_text.summary(e))}")
    table = Table(show_header=False, box=None, pad_edge=False)
    table.add_column("fact", style="bold")
    table.add_column("value", overflow="fold")
    for label, value in explain_text.facts(e):
        table.add_row(f"  {label}", escape(value))
    out.print(table)
    return DONE


def register(commands: Commands) -> None:
    p = commands.add("job", "a job's row and its logs", queue="option", run=cmd_job)
    p.add_argument("id")

    p = commands.add(
        "enqueue", "add a job: {task, args, kwargs} as JSON", queue="option", run=cmd_enqueue
    )
    p.add_argument("task", help="the task's name, as registered (e.g. app.send)")
    p.add_argument("args", nargs="?", help="JSON: an array (args), an object (kwargs) or a value")
    p.add_argument("--kwargs", help="JSON object of keyword arguments")
    p.add_argument("--delay", type=float, default=0.0, help="seconds before it is due")
    p.add_argument("--priority", type=int, default=0, help="higher runs first (-4095..4095)")
    p.add_argument("--job-id", help="an explicit id (refused if it exists)")
    p.add_argument("--max-attempts", type=positive_int, default=1, help="failures allowed")

    for name, help, run in (
        ("remove", "remove a job from whichever set holds it, with its logs", cmd_remove),
        ("reprocess", "move a dead job back to pending", cmd_reprocess),
        ("explain", "why is this job (not) running?", cmd_explain),
    ):
        commands.add(name, help, queue="option", run=run).add_argument("id")

    p = commands.add(
        "cancel", "cancel a job: removed if waiting, signalled (or fenced) if running",
        queue="option", run=cmd_cancel,
    )  # fmt: skip
    p.add_argument("id")
    p.add_argument("--reason", help="recorded as the result cancelled:<reason>")
    p.add_argument(
        "--grace",
        type=float,
        help="seconds a running job gets to stop; then its attempt is fenced (settled "
        "cancelled) and its worker stops it hard (default: cooperative only; 0: now)",
    )
