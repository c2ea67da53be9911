"""``echomq archive`` and ``echomq history``: the archive's commands (``echomq.archive``).

Exit codes as for every echomq command: 0 done (``archive``: stopped by SIGINT/SIGTERM),
1 refused (no archive there, store or Redis unreachable for ``history``, a newer schema;
the reason on stderr, never a traceback), 2 usage.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import logging
import os
import signal
import sys
from collections.abc import Callable
from functools import partial
from typing import Any, Literal

import trio
from rich import box
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from .._model.completion import FinishedJob, FinishState
from ..archive.history import MAX_LIMIT, HistoryPage, history, parse_since
from ..archive.recorder import ArchiveConfig, serve_archive
from ..archive.store import StoreUnavailable, default_store_url
from ..config import DEFAULT_URL
from ..errors import EchoMQError, InvalidArgument, InvalidKey
from .common import Commands, consoles, positive_int

__all__ = ["register", "run_archive_command", "run_history_command"]

DONE, REFUSED, USAGE = 0, 1, 2
log = logging.getLogger("echomq.archive")

Command = Callable[..., argparse.ArgumentParser]


def _limit(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
    if not 1 <= value <= MAX_LIMIT:
        raise argparse.ArgumentTypeError(f"must be in 1..{MAX_LIMIT}: {text!r}")
    return value


def _seconds(text: str) -> float:
    """``86400``, or a duration as ``--since`` takes it (``24h``, ``90m``)."""
    try:
        value = float(text)
    except ValueError:
        now = dt.datetime.now(dt.UTC)
        try:
            value = (now - parse_since(text, now=now)).total_seconds()
        except InvalidArgument as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be > 0: {text!r}")
    return value


def register(commands: Commands) -> None:
    """Declare ``archive`` and ``history`` through the registry, like every command."""

    def command(
        name: str, help: str, *, queue: Literal["positional", "option"] | None = None
    ) -> argparse.ArgumentParser:
        return commands.add(name, help, queue=queue, entry=_run)

    _add_commands(command)


def _run(args: argparse.Namespace) -> int:
    _, err = consoles()
    code: int = args.entry(args, err)
    return code


def _add_commands(command: Command) -> None:
    """``archive`` and ``history`` (``command`` makes a sub-parser)."""
    store_help = "the archive: sqlite:///file.db (or a path) or postgresql://... " + (
        "(default: $ECHOMQ_ARCHIVE_URL or sqlite:///echomq-archive.db)"
    )
    p = command("archive", "record finished jobs into a durable archive (SQLite or PostgreSQL)")
    p.add_argument("-q", "--queue", dest="queues", action="append", required=True,
                   help="a queue whose completions to record (repeat for several)")  # fmt: skip
    p.add_argument("--to", dest="store", help=store_help)
    p.add_argument("--consumer",
                   help="this archiver's name in its group (default: HOST:PID)")  # fmt: skip
    p.add_argument(
        "--group",
        help="the consumer group (default: the store's own, archive:sqlite:HOST:PATH or "
        "archive:postgresql:HOST:PORT/DB; archivers of one store share it)",
    )
    p.add_argument("--batch", type=positive_int, help="entries per slice (default 500)")
    p.add_argument("--claim-idle", type=_seconds,
                   help="take over entries another consumer held this long (60s)")  # fmt: skip
    p.add_argument("--retention", type=_seconds,
                   help="the stream's retention, for the lag warning (default 24h)")  # fmt: skip
    p.add_argument("--max-len", type=positive_int,
                   help="the stream's MAXLEN, for the lag warning (default: none)")  # fmt: skip
    p.set_defaults(entry=run_archive_command)

    p = command("history", "finished jobs from the archive, newest first", queue="positional")
    p.add_argument("--task", help="only jobs of this task")
    p.add_argument("--state", choices=[s.value for s in FinishState], help="only this outcome")
    p.add_argument("--job", dest="job_id", help="only this job id (every attempt archived)")
    p.add_argument("--since", help="finished since: 1h, 30m, 2d, 1h30m or an ISO date/time (UTC)")
    p.add_argument("--until", help="finished before (same forms as --since)")
    p.add_argument("--limit", type=_limit, default=20, help="jobs per page (default 20)")
    p.add_argument("--before", help="the next page: the cursor the previous page printed")
    p.add_argument("--to", dest="store", help=store_help)
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    p.set_defaults(entry=run_history_command)


def _url(args: argparse.Namespace) -> str:
    url: str = getattr(args, "url", None) or os.environ.get("ECHOMQ_URL") or DEFAULT_URL
    return url


def _leaf(exc: BaseException) -> BaseException:
    while isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
        exc = exc.exceptions[0]
    return exc


def _fail(err: Console, name: str, exc: BaseException) -> int | None:
    """The exit code for an error of ours (printed), or None for anything else."""
    if isinstance(exc, InvalidKey | InvalidArgument):
        err.print(f"echomq {name}: {escape(str(exc))}", soft_wrap=True)
        return USAGE
    if isinstance(exc, EchoMQError | OSError):
        err.print(f"echomq {name}: {escape(str(exc))}", soft_wrap=True)
        return REFUSED
    return None


# -- archive --------------------------------------------------------------------------------


async def _archive_until_signalled(args: argparse.Namespace, config: ArchiveConfig) -> None:
    with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(
                partial(
                    serve_archive, _url(args), args.queues, args.store or default_store_url(),
                    consumer=args.consumer, group=args.group, config=config,
                )
            )  # fmt: skip
            async for signum in signals:
                log.info("%s: stopping the archive", signal.Signals(signum).name)
                nursery.cancel_scope.cancel()
                break


def run_archive_command(args: argparse.Namespace, err: Console) -> int:
    if not logging.getLogger().handlers:
        logging.basicConfig(
            level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
        )
    options = {
        name: value
        for name, value in (
            ("batch", args.batch), ("retention", args.retention), ("max_len", args.max_len),
            ("claim_idle", args.claim_idle),
        )
        if value is not None
    }  # fmt: skip
    try:
        config = ArchiveConfig(**options)
        trio.run(_archive_until_signalled, args, config)
    except KeyboardInterrupt:
        return DONE
    except Exception as group:
        code = _fail(err, "archive", _leaf(group))
        if code is None:
            raise
        return code
    return DONE


# -- history --------------------------------------------------------------------------------


def _utc(ms: int | None) -> str:
    if ms is None:
        return "-"
    return dt.datetime.fromtimestamp(ms / 1000, dt.UTC).strftime("%Y-%m-%d %H:%M:%S") + "Z"


def _outcome(job: FinishedJob) -> str:
    if job.state == FinishState.COMPLETED:
        return job.result.decode("utf-8", "replace") if job.result is not None else "-"
    if job.state in (FinishState.DEAD, FinishState.EXPIRED):
        return job.error or "-"
    return job.reason or "-"


def _as_json(job: FinishedJob) -> dict[str, Any]:
    return {
        "queue": job.queue,
        "id": job.id,
        "task": job.task,
        "state": str(job.state),
        "token": job.token,
        "failures": job.failures,
        "result": job.result.decode("utf-8", "replace") if job.result is not None else None,
        "error": job.error,
        "reason": job.reason,
        "created_at": job.created_at,
        "claimed_at": job.claimed_at,
        "finished_at": job.finished_at,
        "archived_at": job.archived_at,
        "stream_id": job.stream_id,
        "extra": dict(job.extra),
    }


def _table(args: argparse.Namespace, page: HistoryPage) -> Table:
    filters = [
        f"{name}={value}"
        for name, value in (
            ("task", args.task), ("state", args.state), ("job", args.job_id),
            ("since", args.since), ("until", args.until),
        )
        if value
    ]  # fmt: skip
    title = f"history of {escape(args.queue)}" + (f" ({', '.join(filters)})" if filters else "")
    table = Table(title=title, box=box.SIMPLE_HEAD, show_edge=False)  # nothing is cut: it folds
    table.add_column("finished", overflow="fold")
    table.add_column("job", overflow="fold")
    table.add_column("task", overflow="fold")
    table.add_column("state", no_wrap=True)
    table.add_column("token", justify="right", no_wrap=True)
    table.add_column("ran", justify="right", overflow="fold")
    table.add_column("result / error / reason", overflow="fold", max_width=60)
    styles = {
        FinishState.COMPLETED: "green",
        FinishState.DEAD: "red",
        FinishState.CANCELLED: "magenta",
        FinishState.EXPIRED: "yellow",
    }
    for job in page.jobs:
        ran = (
            f"{(job.finished_at - job.claimed_at) / 1000:.3f}s"
            if job.claimed_at is not None
            else "-"
        )
        table.add_row(
            _utc(job.finished_at),
            escape(job.id),
            escape(job.task or "-"),
            f"[{styles[job.state]}]{job.state}[/]",
            str(job.token),
            ran,
            escape(_outcome(job)[:500]),
        )
    return table


def run_history_command(args: argparse.Namespace, err: Console) -> int:
    width = None if sys.stdout.isatty() else 200
    out = Console(highlight=False, width=width)
    try:
        since = parse_since(args.since) if args.since else None
        until = parse_since(args.until) if args.until else None
        page = trio.run(
            partial(
                history, args.store or default_store_url(), args.queue, task=args.task,
                state=args.state, job_id=args.job_id, since=since, until=until,
                limit=args.limit, before=args.before,
            )
        )  # fmt: skip
    except KeyboardInterrupt:
        return DONE
    except Exception as group:
        exc = _leaf(group)
        if isinstance(exc, StoreUnavailable):
            reason = f"the archive cannot be reached: {escape(str(exc))}"
            err.print(f"echomq history: {reason}", soft_wrap=True)
            return REFUSED
        code = _fail(err, "history", exc)
        if code is None:
            raise
        return code
    if args.json:
        out.print_json(json.dumps({"jobs": [_as_json(j) for j in page.jobs], "next": page.next}))
        return DONE
    if not page.jobs:
        out.print(f"no finished jobs of {escape(args.queue)} in the archive match")
        return DONE
    out.print(_table(args, page))
    if page.next:
        out.print(f"more: --before {page.next}")
    return DONE
