"""Job-scope commands: ``job``, ``enqueue``, ``remove``, ``reprocess`` (one job, or every
dead one: ``--all-dead``), ``cancel``, ``explain``."""

from __future__ import annotations

import argparse
import math
from typing import TYPE_CHECKING

from .. import admin, cancel, jobs
from .._model.backoff import MAX_DELAY
from .._model.codec import codec_named
from .._model.options import expires_fields
from .._wire.connection import Connection
from ..errors import InvalidArgument, JobGone
from ..jobs.steps import read_steps
from . import explain_text
from .common import (
    DONE,
    Commands,
    UsageError,
    call_args,
    checked,
    positive_int,
    show,
    utc,
)

if TYPE_CHECKING:
    from rich.console import Console

__all__ = ["register"]


def _batch(text: str) -> int:
    value = positive_int(text)
    if value > admin.MAX_REPROCESS_BATCH:
        raise argparse.ArgumentTypeError(f"at most {admin.MAX_REPROCESS_BATCH}: {text!r}")
    return value


async def cmd_job(conn: Connection, args: argparse.Namespace, out: Console) -> int:
    from rich.markup import escape
    from rich.table import Table

    info = await jobs.get_job(conn, args.queue, args.id)
    if info is None:
        raise JobGone(args.id)
    logs = await jobs.get_job_logs(conn, args.queue, args.id)
    steps = await read_steps(conn, args.queue, args.id)
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
        ("expires", utc(info.expires_at)),
        ("finished", utc(info.finished_at)),
    ):
        table.add_row(label, escape(value))
    out.print(table)
    if steps:
        out.print(f"steps ({len(steps)}):")
        ordered = sorted(steps.values(), key=lambda r: (r.at_ms, r.name))
        for line in explain_text.step_lines(ordered):
            out.print(f"  {escape(line)}")
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
    if args.delay > MAX_DELAY:
        raise UsageError(f"--delay must be at most {MAX_DELAY:.0f} seconds")
    expires_ms = None
    if args.expires is not None:
        try:
            expires_ms = expires_fields(args.expires)["expires_ms"]
        except InvalidArgument as exc:
            raise UsageError(f"--expires: {exc}") from None
    payload = codec_named(args.codec).encode_call(args.task, positional, call_kwargs)
    job = jobs.NewJob(
        payload=payload,
        job_id=args.job_id,
        delay_ms=round(args.delay * 1000),
        priority=args.priority,
        max_attempts=args.max_attempts,
        task=args.task,  # on the row, as the app's enqueue writes it (jobs --task reads it)
        expires_ms=expires_ms,
    )
    [job_id] = await jobs.enqueue_many(conn, args.queue, [job])
    out.print(job_id)
    return DONE


async def cmd_remove(conn: Connection, args: argparse.Namespace, out: Console) -> int:
    await jobs.remove_job(conn, args.queue, args.id)
    out.print(f"removed {args.id} from {args.queue}")
    return DONE


def _reprocess_queue(args: argparse.Namespace) -> None:
    """``reprocess ID [-q QUEUE]`` or ``reprocess [QUEUE] --all-dead [-q QUEUE]``: set
    ``args.queue`` (and ``args.id``), or refuse the mix as usage."""
    default = args.queue_option or args.default_queue
    if args.all_dead:
        if args.target is not None and args.queue_option not in (None, args.target):
            raise UsageError(f"two queues named: {args.target!r} and -q {args.queue_option!r}")
        args.queue, args.id = args.target or default, None
        return
    if args.target is None:
        raise UsageError("name the dead job's id, or give --all-dead")
    if args.task is not None or args.batch is not None or args.limit is not None:
        raise UsageError("--task, --batch and --limit go with --all-dead")
    args.queue, args.id = default, args.target


async def cmd_reprocess(conn: Connection, args: argparse.Namespace, out: Console) -> int:
    if args.all_dead:
        return await _reprocess_dead(conn, args, out)
    await jobs.reprocess_job(conn, args.queue, args.id)
    out.print(f"reprocessed {args.id}: back in pending on {args.queue}")
    return DONE


async def _reprocess_dead(conn: Connection, args: argparse.Namespace, out: Console) -> int:
    from rich.markup import escape
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

    queue = args.queue
    with Progress(
        TextColumn(f"reprocessing the dead jobs of {escape(queue)}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("looked at, {task.fields[reprocessed]} reprocessed"),
        console=out,
        transient=True,
        disable=not out.is_terminal,
    ) as bar:
        task = bar.add_task("reprocess", total=None, reprocessed=0)

        def advance(so_far: admin.Reprocessed) -> None:
            bar.update(
                task,
                completed=so_far.looked,
                total=max(so_far.dead_at_start, 1),
                reprocessed=f"{so_far.reprocessed:,}",
            )

        done = await admin.reprocess_dead(
            conn,
            queue,
            task=args.task,
            batch=args.batch or admin.DEFAULT_REPROCESS_BATCH,
            limit=args.limit,
            on_progress=advance,
        )
    which = f"dead jobs of task {args.task}" if args.task else "dead jobs"
    if not done.dead_at_start:
        out.print(f"no dead jobs in {escape(queue)}")
        return DONE
    skipped = f"; {done.skipped:,} left the dead set meanwhile" if done.skipped else ""
    out.print(
        f"reprocessed {done.reprocessed:,} {which} of {escape(queue)} (of "
        f"{done.dead_at_start:,} dead): back in pending{skipped}"
    )
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


_checked_reprocess = checked(cmd_reprocess)


async def cmd_reprocess_checked(conn: Connection, args: argparse.Namespace, out: Console) -> int:
    """``reprocess``, once its queue is read from its arguments (either form)."""
    _reprocess_queue(args)
    return await _checked_reprocess(conn, args, out)


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
    p.add_argument(
        "--expires",
        type=float,
        metavar="SECONDS",
        help="its deadline, seconds after the enqueue: not started by then, it never runs",
    )
    p.add_argument("--job-id", help="an explicit id (refused if it exists)")
    p.add_argument("--max-attempts", type=positive_int, default=1, help="failures allowed")
    p.add_argument("--create", action="store_true", help="make the queue if it does not exist")
    p.add_argument(
        "--codec",
        choices=("json", "msgpack"),
        default="json",
        help="the queue's codec, as its Queue(codec=...) (default json)",
    )

    for name, help, run in (
        ("remove", "remove a job from whichever set holds it, with its logs", cmd_remove),
        ("explain", "why is this job (not) running?", cmd_explain),
    ):
        commands.add(name, help, queue="option", run=run).add_argument("id")

    p = commands.add(
        "reprocess",
        "move dead jobs back to pending: `reprocess ID -q QUEUE`, `reprocess QUEUE --all-dead`",
        run=cmd_reprocess_checked,
    )
    p.add_argument("target", nargs="?", metavar="ID|QUEUE",
                   help="the dead job's id; with --all-dead, the queue")  # fmt: skip
    p.add_argument(
        "-q", "--queue", dest="queue_option",
        help=f"the queue (default: $ECHOMQ_QUEUE or {commands.default_queue!r})",
    )  # fmt: skip
    p.set_defaults(default_queue=commands.default_queue)
    p.add_argument("--all-dead", action="store_true", help="every dead job of the queue")
    p.add_argument("--task", help="--all-dead: only the dead jobs of this task")
    p.add_argument(
        "--batch", type=_batch,
        help=f"--all-dead: jobs per round trip, 1..{admin.MAX_REPROCESS_BATCH} "
        f"(default {admin.DEFAULT_REPROCESS_BATCH})",
    )  # fmt: skip
    p.add_argument("--limit", type=positive_int, help="--all-dead: at most this many jobs")

    p = commands.add(
        "cancel", "cancel a job: removed if waiting, signalled (or fenced) if running",
        queue="option", run=cmd_cancel,
    )  # fmt: skip
    p.add_argument("id")
    p.add_argument("--reason", help="recorded as the job's cancel_reason")
    p.add_argument(
        "--grace",
        type=float,
        help="seconds a running job gets to stop; then its attempt is fenced (settled "
        "cancelled) and its worker stops it hard (default: cooperative only; 0: now)",
    )
