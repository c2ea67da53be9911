"""The ``echomq`` command line (also ``python -m echomq``).

Rule 1: every command is a thin shell over a verb (``echomq.admin``, ``echomq.jobs``,
``echomq.cancel``); no command writes Redis by itself.
Rule 2: exit codes: 0 done, 1 refused (a typed refusal or an unreachable server; the reason
in plain words on stderr, never a traceback), 2 usage (bad flags, names or JSON).
Rule 3: tables and progress bars come from ``rich``; when stdout is not a terminal the
output stays plain (no colour, and ``watch`` prints one line per event).

``--url`` (or ``$ECHOMQ_URL``, else redis://127.0.0.1:6379/0) picks the server; job
commands take ``--queue`` (or ``$ECHOMQ_QUEUE``, else ``default``). ``echomq worker
module:queue`` tries the queue's own ``Queue(url=...)`` before that default.
"""

from __future__ import annotations

import argparse
import datetime as dt
import importlib
import inspect
import json
import math
import os
import re
import sys
from collections.abc import Awaitable, Callable, Sequence
from functools import partial
from typing import Any, NoReturn

import trio
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from . import admin, jobs
from ._model.text import raw_text, show_bytes
from ._redis.connection import Connection, connect
from ._redis.keyspace import PREFIX, Keyspace
from .config import DEFAULT_URL, parse_url
from .errors import (
    ActiveJobs,
    ConnectionLost,
    DuplicateJob,
    EchoMQError,
    InvalidArgument,
    InvalidKey,
    JobGone,
    JobLocked,
    NotCancellable,
    NotDead,
    NotPaused,
    SerializationError,
    ServerError,
)

__all__ = ["main", "build_parser"]

DONE, REFUSED, USAGE = 0, 1, 2
DEFAULT_QUEUE = "default"
_QUEUE_KEY = re.compile(
    rf"^{PREFIX}:\{{([A-Za-z0-9._~-]{{1,128}})\}}:(meta|pending|active|schedule|dead|completed)$"
)
# events after which a job no longer runs: its bar leaves the watch display
_DONE_EVENTS = frozenset({"completed", "dead", "retrying", "removed", "released", "recovered"})


class UsageError(Exception):
    """Bad input found after argparse: exit 2 with the message."""


# -- plumbing -------------------------------------------------------------------------------


def _consoles() -> tuple[Console, Console]:
    # off a terminal (a pipe, a file, a test) tables get room rather than 80 columns
    width = None if sys.stdout.isatty() else 200
    out = Console(highlight=False, width=width)
    return out, Console(stderr=True, highlight=False, width=None if sys.stderr.isatty() else 200)


def _url(args: argparse.Namespace) -> str:
    url: str = args.url or os.environ.get("ECHOMQ_URL") or DEFAULT_URL
    return url


def _refusal(exc: EchoMQError, args: argparse.Namespace) -> str:
    """The reason for a refusal, in plain words."""
    queue = getattr(args, "queue", None)
    job = getattr(args, "id", None)
    if isinstance(exc, JobGone):
        return f"no job {job!r} in queue {queue!r}"
    if isinstance(exc, JobLocked):
        return f"job {job!r} is under an operator lock (its :lock key or lock field); not removed"
    if isinstance(exc, NotDead):
        return f"job {job!r} is not dead: only dead jobs can be reprocessed"
    if isinstance(exc, NotPaused):
        return f"queue {queue!r} is not paused: run `echomq pause {queue}` first"
    if isinstance(exc, ActiveJobs):
        return f"queue {queue!r} has jobs in flight: wait for them, or pass --force"
    if isinstance(exc, NotCancellable):
        return f"job {job!r} is already completed or dead: there is nothing to cancel"
    if isinstance(exc, DuplicateJob):
        return f"a job with id {args.job_id!r} already exists in queue {queue!r}"
    if isinstance(exc, ConnectionLost):
        return f"cannot reach Redis at {parse_url(_url(args)).display}: {exc}"
    if isinstance(exc, ServerError):
        return f"Redis refused: {exc}"
    return str(exc) or type(exc).__name__


def _leaf(exc: BaseException) -> BaseException:
    while isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
        exc = exc.exceptions[0]
    return exc


Command = Callable[[Connection, argparse.Namespace, Console], Awaitable[int]]


def _run(command: Command, args: argparse.Namespace, out: Console, err: Console) -> int:
    """Open a connection, run ``command``, map errors to exit codes."""

    async def body() -> int:
        async with connect(_url(args)) as conn:
            return await command(conn, args, out)

    try:
        return trio.run(body)
    except KeyboardInterrupt:
        return DONE
    except Exception as group:  # unwrap nursery groups; re-raise what is not ours
        exc = _leaf(group)
        if isinstance(exc, UsageError | InvalidKey | InvalidArgument | SerializationError):
            err.print(f"echomq {args.command}: {escape(str(exc))}")
            return USAGE
        if isinstance(exc, EchoMQError):
            err.print(f"echomq {args.command}: {escape(_refusal(exc, args))}")
            return REFUSED
        if isinstance(exc, OSError):
            err.print(f"echomq {args.command}: {escape(str(exc))}")
            return REFUSED
        raise


def _utc(ms: int | None) -> str:
    if ms is None:
        return "-"
    return dt.datetime.fromtimestamp(ms / 1000, dt.UTC).strftime("%Y-%m-%d %H:%M:%S") + "Z"


SHOW_LIMIT = 64 * 1024  # bytes of a payload or result `job` prints


def _show(data: bytes | None) -> str:
    """A payload or result as stored, never parsed: text, or raw bytes marked as such."""
    if data is None:
        return "-"
    return show_bytes(data, SHOW_LIMIT)


# -- queue scope ----------------------------------------------------------------------------


async def _find_queues(conn: Connection) -> list[str]:
    """Every queue with a meta hash or a state set, by SCAN."""
    found: set[str] = set()
    cursor: Any = b"0"
    while True:
        cursor, batch = await conn.execute(
            "SCAN", cursor, "MATCH", f"{PREFIX}:{{*}}:*", "COUNT", 1000
        )
        for key in batch:
            match = _QUEUE_KEY.match(key.decode("utf-8", "replace"))
            if match:
                found.add(match.group(1))
        if cursor in (b"0", 0):
            return sorted(found)


async def cmd_status(conn: Connection, args: argparse.Namespace, out: Console) -> int:
    queues = [args.queue] if args.queue else await _find_queues(conn)
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
    if not rows:
        out.print(f"no queues at {parse_url(_url(args)).display}")
        return DONE
    table = Table(title=f"echomq at {parse_url(_url(args)).display}")
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


# -- job scope ------------------------------------------------------------------------------


async def cmd_job(conn: Connection, args: argparse.Namespace, out: Console) -> int:
    info = await jobs.get_job(conn, args.queue, args.id)
    if info is None:
        raise JobGone(args.id)
    logs = await jobs.get_job_logs(conn, args.queue, args.id)
    table = Table(title=f"job {escape(args.id)} in {escape(args.queue)}", show_header=False)
    table.add_column("field", style="bold")
    table.add_column("value", overflow="fold")
    for label, value in (
        ("state", str(info.state)),
        ("payload", _show(info.payload)),
        ("attempts (token)", str(info.attempts)),
        ("failures", f"{info.failures} of {info.max_attempts}"),
        ("stalled", str(info.stalled)),
        ("priority", str(info.priority)),
        ("progress", info.progress or "-"),
        ("last error", info.last_error or "-"),
        ("result", _show(info.result)),
        ("created", _utc(info.created_at)),
        ("claimed", _utc(info.claimed_at)),
        ("run at", _utc(info.run_at)),
        ("finished", _utc(info.finished_at)),
    ):
        table.add_row(label, escape(value))
    out.print(table)
    out.print(f"logs ({len(logs)}):" if logs else "logs: none")
    for line in logs:
        out.print(f"  {escape(line)}")
    return DONE


def _call_args(raw: str | None) -> tuple[list[Any], dict[str, Any]]:
    """``[json args]``: a JSON array is the args, an object the kwargs, anything else one arg."""
    if raw is None:
        return [], {}
    try:
        value = json.loads(raw)
    except ValueError as exc:
        raise UsageError(f"arguments are not JSON: {exc}") from None
    if isinstance(value, list):
        return value, {}
    if isinstance(value, dict):
        return [], value
    return [value], {}


async def cmd_enqueue(conn: Connection, args: argparse.Namespace, out: Console) -> int:
    from ._model.codec import JSON

    call_args, call_kwargs = _call_args(args.args)
    if args.kwargs is not None:
        extra = _call_args(args.kwargs)[1]
        if not extra:
            raise UsageError("--kwargs must be a JSON object")
        call_kwargs.update(extra)
    if not math.isfinite(args.delay) or args.delay < 0:
        raise UsageError("--delay must be a number of seconds >= 0")
    payload = JSON.encode_call(args.task, call_args, call_kwargs)
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
    request = _lazy("echomq.cancel", "request", "cancel")
    outcome = await request(conn, args.queue, args.id, args.reason)
    out.print(f"{outcome} {args.id}")
    return DONE


async def cmd_explain(conn: Connection, args: argparse.Namespace, out: Console) -> int:
    e = await jobs.explain(conn, args.queue, args.id)
    out.print(f"{escape(args.id)}: {escape(e.summary)}")
    table = Table(show_header=False, box=None, pad_edge=False)
    table.add_column("fact", style="bold")
    table.add_column("value", overflow="fold")
    for label, value in e.facts():
        table.add_row(f"  {label}", escape(value))
    out.print(table)
    return DONE


# -- watch ----------------------------------------------------------------------------------


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


def _event_line(event: Any) -> str:
    stamp = dt.datetime.now().strftime("%H:%M:%S.%f")[:-3]
    extra = " ".join(
        f"{k}={v}" for k, v in sorted(event.fields.items()) if k not in ("event", "job")
    )
    return " ".join(x for x in (stamp, event.event, event.job or "-", extra) if x)


async def cmd_watch(conn: Connection, args: argparse.Namespace, out: Console) -> int:
    from .events import open_event_feed

    ks = Keyspace(args.queue)
    if args.duration is not None and args.duration <= 0:
        raise UsageError("--duration must be > 0 seconds")
    if args.count is not None and args.count <= 0:
        raise UsageError("--count must be > 0")
    plain = args.plain or not out.is_terminal
    async with open_event_feed(_url(args), args.queue) as feed:
        with feed.listen(buffer=4096) as events:
            active = [x.decode() for x in await conn.execute("ZRANGE", ks.active, 0, 199)]
            progress = {job: await conn.execute("HGET", ks.job(job), "progress") for job in active}
            with trio.move_on_after(args.duration if args.duration is not None else math.inf):
                if plain:
                    await _watch_plain(args, out, events, active, progress)
                else:
                    await _watch_live(args, out, events, active, progress)
    return DONE


async def _watch_plain(
    args: argparse.Namespace,
    out: Console,
    events: Any,
    active: list[str],
    progress: dict[str, bytes | None],
) -> None:
    print(f"watching {args.queue}: {len(active)} active", flush=True)
    for job in active:
        value = progress[job]
        suffix = f" progress={raw_text(value)}" if value is not None else ""
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
    events: Any,
    active: list[str],
    progress: dict[str, bytes | None],
) -> None:
    from rich.console import Group
    from rich.live import Live
    from rich.progress import BarColumn, Progress, TaskID, TextColumn
    from rich.text import Text

    counts = {"completed": 0, "dead": 0, "retrying": 0}
    bars = Progress(
        TextColumn("{task.description}"), BarColumn(), TextColumn("{task.fields[note]}")
    )
    tasks: dict[str, TaskID] = {}

    class Header:
        def __rich__(self) -> Text:
            return Text.from_markup(
                f"[bold]{escape(args.queue)}[/]  {len(tasks)} active  "
                f"[green]{counts['completed']} completed[/]  "
                f"[yellow]{counts['retrying']} retrying[/]  [red]{counts['dead']} dead[/]"
            )

    def show(job: str, value: Any) -> None:
        pct = _percent(value) if value is not None else None
        note = "" if value is None else escape(str(value))
        if job not in tasks:
            tasks[job] = bars.add_task(escape(job), total=100, note=note)
        bars.update(tasks[job], completed=pct or 0, note=note)

    for job in active:
        value = progress[job]
        show(job, None if value is None else raw_text(value))
    seen = 0
    with Live(Group(Header(), bars), console=out, transient=True, refresh_per_second=8) as live:
        async for event in events:
            name, job = event.event, event.job
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


# -- other engineers' entry points ----------------------------------------------------------


def _lazy(module: str, name: str, feature: str) -> Any:
    """``module.name``, or a refusal saying that this install lacks ``feature``."""
    try:
        return getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError) as exc:
        raise EchoMQError(
            f"{feature} is not available in this install ({module}.{name}: {exc})"
        ) from None


def _call_entry(
    args: argparse.Namespace, err: Console, module: str, name: str, **kwargs: Any
) -> int:
    """Call a blocking (or async) entry point that answers an exit code.

    Options the user did not give (None) are left out, so the entry point's defaults hold.
    """
    kwargs = {k: v for k, v in kwargs.items() if v is not None}
    try:
        entry = _lazy(module, name, args.command)
    except EchoMQError as exc:
        err.print(f"echomq {args.command}: {escape(str(exc))}")
        return REFUSED
    try:
        if inspect.iscoroutinefunction(entry):
            code = trio.run(partial(entry, **kwargs))
        else:
            code = entry(**kwargs)
    except KeyboardInterrupt:
        return DONE
    except (InvalidKey, InvalidArgument) as exc:
        err.print(f"echomq {args.command}: {escape(str(exc))}")
        return USAGE
    except EchoMQError as exc:
        err.print(f"echomq {args.command}: {escape(_refusal(exc, args))}")
        return REFUSED
    return int(code or 0)


def run_worker_command(args: argparse.Namespace, err: Console) -> int:
    if ":" not in args.target:
        err.print(f"echomq worker: expected module:queue, not {args.target!r}")
        return USAGE
    return _call_entry(
        args,
        err,
        "echomq._worker.main",
        "run_worker",
        target=args.target,
        url=args.url or os.environ.get("ECHOMQ_URL"),  # None: the queue's own url
        concurrency=args.concurrency,
        recovery=args.recovery,
        recovery_interval=args.recovery_interval,
        max_stalled=args.max_stalled,
        grace=args.grace,
    )


def run_dashboard_command(args: argparse.Namespace, err: Console) -> int:
    return _call_entry(
        args,
        err,
        "echomq.dashboard",
        "run_dashboard",
        url=_url(args),
        host=args.host,
        port=args.port,
        token=args.token,
        queues=args.queues or None,
        allowed_hosts=args.allow_hosts or None,
    )


def run_demo_command(args: argparse.Namespace, err: Console) -> int:
    return _call_entry(
        args,
        err,
        "echomq.demo",
        "run_demo",
        url=args.url or "embedded://",  # a demo never writes to $ECHOMQ_URL unasked
        duration=args.duration,
        port=args.port,
        dashboard=not args.no_dashboard,
    )


# -- the parser ------------------------------------------------------------------------------


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        self.print_usage(sys.stderr)
        self.exit(USAGE, f"{self.prog}: {message}\n")


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be > 0: {text!r}")
    return value


def _port(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a port number: {text!r}") from None
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"a port is 0..65535 (0: any free port), not {value}")
    return value


BUDGET_HELP = f"jobs deleted per call, 1..{admin.MAX_BUDGET} (default %(default)s)"


def _budget(text: str) -> int:
    value = _positive_int(text)
    if value > admin.MAX_BUDGET:
        raise argparse.ArgumentTypeError(f"at most {admin.MAX_BUDGET} jobs per call: {text!r}")
    return value


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="echomq",
        description="Operate echomq queues: status, jobs, pause/resume, drain, obliterate, "
        "watch; run a worker, the dashboard or the demo.",
        epilog="Exit codes: 0 done, 1 refused (reason on stderr), 2 usage.",
    )
    parser.add_argument("--url", help="Redis URL (default: $ECHOMQ_URL or " + DEFAULT_URL + ")")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    sub.required = True
    default_queue = os.environ.get("ECHOMQ_QUEUE") or DEFAULT_QUEUE

    def command(name: str, help: str, *, queue: str | None = None) -> argparse.ArgumentParser:
        p = sub.add_parser(name, help=help, description=help)
        p.add_argument("--url", default=argparse.SUPPRESS, help="Redis URL")
        if queue == "positional":
            p.add_argument("queue", help="the queue's name")
        elif queue == "option":
            p.add_argument(
                "-q", "--queue", default=default_queue,
                help=f"the queue (default: $ECHOMQ_QUEUE or {DEFAULT_QUEUE!r})",
            )  # fmt: skip
        return p

    p = command("status", "counts per state, the pause gate and throughput")
    p.add_argument("queue", nargs="?", help="one queue (default: every queue found)")
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    p.set_defaults(run=cmd_status)

    p = command("job", "a job's row and its logs", queue="option")
    p.add_argument("id")
    p.set_defaults(run=cmd_job)

    p = command("enqueue", "add a job: {task, args, kwargs} as JSON", queue="option")
    p.add_argument("task", help="the task's name, as registered (e.g. app.send)")
    p.add_argument("args", nargs="?", help="JSON: an array (args), an object (kwargs) or a value")
    p.add_argument("--kwargs", help="JSON object of keyword arguments")
    p.add_argument("--delay", type=float, default=0.0, help="seconds before it is due")
    p.add_argument("--priority", type=int, default=0, help="higher runs first (-4095..4095)")
    p.add_argument("--job-id", help="an explicit id (refused if it exists)")
    p.add_argument("--max-attempts", type=_positive_int, default=1, help="failures allowed")
    p.set_defaults(run=cmd_enqueue)

    for name, help, run in (
        ("pause", "stop claiming on a queue (workers and claims alike)", cmd_pause),
        ("resume", "claim again, and wake idle workers", cmd_resume),
    ):
        command(name, help, queue="positional").set_defaults(run=run)

    p = command("drain", "delete the pending backlog (active jobs stay)", queue="positional")
    p.add_argument("--include-schedule", action="store_true", help="drain scheduled jobs too")
    p.add_argument("--budget", type=_budget, default=admin.DEFAULT_BUDGET, help=BUDGET_HELP)
    p.set_defaults(run=cmd_drain)

    p = command("obliterate", "delete a paused queue and every key of it", queue="positional")
    p.add_argument("--force", action="store_true", help="delete jobs in flight too")
    p.add_argument("--budget", type=_budget, default=admin.DEFAULT_BUDGET, help=BUDGET_HELP)
    p.set_defaults(run=cmd_obliterate)

    for name, help, run in (
        ("remove", "remove a job from whichever set holds it, with its logs", cmd_remove),
        ("reprocess", "move a dead job back to pending", cmd_reprocess),
        ("explain", "why is this job (not) running?", cmd_explain),
    ):
        p = command(name, help, queue="option")
        p.add_argument("id")
        p.set_defaults(run=run)

    p = command("cancel", "cancel a job: removed if waiting, signalled if running", queue="option")
    p.add_argument("id")
    p.add_argument("--reason", help="recorded as the result cancelled:<reason>")
    p.set_defaults(run=cmd_cancel)

    p = command("watch", "live progress of a queue's active jobs", queue="positional")
    p.add_argument("--duration", type=float, help="stop after this many seconds")
    p.add_argument("--count", type=int, help="stop after this many events")
    p.add_argument("--plain", action="store_true", help="one line per event (default off a tty)")
    p.set_defaults(run=cmd_watch)

    p = command("worker", "run a worker: module:queue names a Queue object")
    p.add_argument("target", help="module:attribute of an echomq.Queue (e.g. app.tasks:queue)")
    p.add_argument("--concurrency", type=_positive_int, help="jobs at once (default 64)")
    p.add_argument("--recovery", choices=("reap", "stalled"), help="(default reap)")
    p.add_argument("--recovery-interval", type=float, help="seconds (default 5)")
    p.add_argument(
        "--max-stalled",
        type=_positive_int,
        help="recovery bound (default 1): stalled = dead at N stalls; reap = recovered N times",
    )
    p.add_argument("--grace", type=float, help="seconds for in-flight jobs (default 10)")
    p.set_defaults(entry=run_worker_command)

    p = command("dashboard", "serve the live dashboard on loopback")
    p.add_argument("--host", default="127.0.0.1",
                   help="address to bind (default 127.0.0.1; others: --allow-host)")  # fmt: skip
    p.add_argument("--port", type=_port, help="0..65535, 0 for any free port (default 8000)")
    p.add_argument("--token", help="required by the operator buttons: 8..256 of "
                   "[A-Za-z0-9._~-] (default: generated)")  # fmt: skip
    p.add_argument("--queue", dest="queues", action="append", help="follow this queue (repeat)")
    p.add_argument("--allow-host", dest="allow_hosts", action="append", metavar="NAME",
                   help="a Host name browsers may use besides loopback (repeat; needed to "
                   "bind a non-loopback --host)")  # fmt: skip
    p.set_defaults(entry=run_dashboard_command)

    p = command("demo", "a demo: producers, workers and the dashboard (embedded Redis)")
    p.add_argument("--duration", type=float, help="stop after this many seconds")
    p.add_argument("--port", type=_port, help="the dashboard's port")
    p.add_argument("--no-dashboard", action="store_true")
    p.set_defaults(entry=run_demo_command)

    from .archive.commands import add_commands as add_archive_commands  # archive, history

    add_archive_commands(sub, command)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI; answer the exit code (the ``echomq`` script exits with it)."""
    args = build_parser().parse_args(argv)
    out, err = _consoles()
    if hasattr(args, "entry"):
        code: int = args.entry(args, err)
        return code
    return _run(args.run, args, out, err)
