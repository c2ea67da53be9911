"""``echomq repeat list|add|remove|pause|resume QUEUE``: the repeat registry (docs/repeat.md)."""

from __future__ import annotations

import argparse
import json
import re
from typing import TYPE_CHECKING, Any

from .. import repeat
from .._model.codec import codec_named
from .._wire.connection import Connection
from ..repeat import RepeatInfo
from . import explain_text
from .common import DONE, Commands, Parser, UsageError, call_args, checked, positive_int

if TYPE_CHECKING:
    from rich.console import Console

__all__ = ["duration", "register"]

_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}


def duration(text: str) -> float:
    """Seconds from ``30``, ``1.5``, ``250ms``, ``30s``, ``5m``, ``2h``, ``1d``."""
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|d)?\s*", text)
    if match is None:
        raise argparse.ArgumentTypeError(f"not a duration (e.g. 30s, 5m, 1h): {text!r}")
    return float(match[1]) * _UNITS[match[2] or "s"]


def _row(info: RepeatInfo, now_ms: int, upcoming: int) -> dict[str, Any]:
    return {
        "key": info.key,
        "task": info.task,
        "schedule": info.schedule.describe(),
        "every_ms": info.schedule.every_ms,
        "cron": info.schedule.cron,
        "tz": info.schedule.tz if info.schedule.cron else None,
        "paused": info.paused,
        "next_ms": info.next_ms,
        "upcoming_ms": info.upcoming(upcoming),
        "missed": info.missed,
        "runs": info.runs,
        "coalesced": info.coalesced,
        "skipped": info.skipped,
        "last_job": info.last_job,
        "last_slot_ms": info.last_slot,
        "source": info.source,
    }


async def cmd_list(conn: Connection, args: argparse.Namespace, out: Console) -> int:
    from rich.markup import escape
    from rich.table import Table

    listing = await repeat.list_repeats(conn, args.queue)
    if args.json:
        rows = [_row(info, listing.now_ms, args.upcoming) for info in listing.records]
        unreadable = [{"key": k, "error": e} for k, e in listing.unreadable]
        out.print_json(
            json.dumps({"now_ms": listing.now_ms, "repeats": rows, "unreadable": unreadable})
        )
        return DONE
    if not listing.records and not listing.unreadable:
        out.print(f"no repeatables in {escape(args.queue)}")
        return DONE
    table = Table(
        title=f"repeatables of {escape(args.queue)} ({listing.total}, {listing.paused} paused)"
    )
    for name in ("key", "task", "schedule", "next runs", "runs", "missed", "last job"):
        table.add_column(name, overflow="fold")
    for info in listing.records:
        if info.paused:
            upcoming = "[yellow]paused[/]"
        else:
            upcoming = "\n".join(
                explain_text.when(ms, listing.now_ms) for ms in info.upcoming(args.upcoming)
            )
        missed = f"{info.missed}: {info.coalesced} coalesced, {info.skipped} skipped"
        table.add_row(
            escape(info.key),
            escape(info.task),
            escape(info.schedule.describe()),
            upcoming,
            str(info.runs),
            missed,
            escape(info.last_job or "-"),
        )
    out.print(table)
    for key, error in listing.unreadable:
        out.print(f"[red]{escape(key)}[/]: {escape(error)}")
    return DONE


async def cmd_add(conn: Connection, args: argparse.Namespace, out: Console) -> int:
    from rich.markup import escape

    call, kwargs = call_args(args.args)
    if args.kwargs is not None:
        extra = call_args(args.kwargs)[1]
        if not extra:
            raise UsageError("--kwargs must be a JSON object")
        kwargs.update(extra)
    if (args.every is None) == (args.cron is None):
        raise UsageError("give --every or --cron (one)")
    schedule = repeat.Schedule.of(every=args.every, cron=args.cron, tz=args.tz)
    added = await repeat.add(
        conn,
        args.queue,
        args.key,
        task=args.task,
        payload=codec_named(args.codec).encode_call(args.task, call, kwargs),
        schedule=schedule,
        missed=args.missed,
        grace_ms=round(args.grace * 1000),
        priority=args.priority,
        max_attempts=args.max_attempts,
    )
    what = "added" if added.created else "updated"
    listing_now = explain_text.utc(added.next_ms)
    out.print(
        f"{what} {escape(args.key)} on {escape(args.queue)}: {escape(schedule.describe())}, "
        f"next run at {listing_now}"
    )
    return DONE


async def cmd_remove(conn: Connection, args: argparse.Namespace, out: Console) -> int:
    await repeat.remove(conn, args.queue, args.key)
    out.print(f"removed repeatable {args.key} from {args.queue} (runs already enqueued stay)")
    return DONE


async def cmd_pause(conn: Connection, args: argparse.Namespace, out: Console) -> int:
    changed = await repeat.pause(conn, args.queue, args.key)
    out.print(f"repeatable {args.key} {'paused' if changed else 'was already paused'}")
    return DONE


async def cmd_resume(conn: Connection, args: argparse.Namespace, out: Console) -> int:
    next_ms = await repeat.resume(conn, args.queue, args.key)
    out.print(f"repeatable {args.key} running: next run at {explain_text.utc(next_ms)}")
    return DONE


_ACTIONS = {
    "list": cmd_list,
    "add": cmd_add,
    "remove": cmd_remove,
    "pause": cmd_pause,
    "resume": cmd_resume,
}


async def cmd_repeat(conn: Connection, args: argparse.Namespace, out: Console) -> int:
    return await _ACTIONS[args.action](conn, args, out)


def register(commands: Commands) -> None:
    p = commands.add(
        "repeat", "repeatable jobs: list, add, remove, pause, resume (docs/repeat.md)",
        run=checked(cmd_repeat),  # its queue is each action's argument
    )  # fmt: skip
    sub = p.add_subparsers(dest="action", metavar="ACTION", parser_class=Parser)
    sub.required = True

    def action(name: str, help: str, key: bool = True) -> argparse.ArgumentParser:
        a = sub.add_parser(name, help=help, description=help)
        a.add_argument("queue", help="the queue's name")
        if key:
            a.add_argument("key", help="the repeatable's key")
        return a

    a = action("list", "the queue's repeatables with their upcoming runs", key=False)
    a.add_argument("--upcoming", type=positive_int, default=3, help="runs shown per key (3)")
    a.add_argument("--json", action="store_true", help="print JSON instead of a table")

    a = action(
        "add", "register a repeatable (or update it: same key, same schedule keeps its slot)"
    )
    a.add_argument("task", help="the task's name, as registered (e.g. app.report)")
    a.add_argument("args", nargs="?", help="JSON: an array (args), an object (kwargs) or a value")
    a.add_argument("--kwargs", help="JSON object of keyword arguments")
    a.add_argument("--every", type=duration, help="an interval: 30s, 5m, 1h, 250ms")
    a.add_argument("--cron", help='a cron expression, 5 fields: "*/5 * * * *"')
    a.add_argument("--tz", help="the cron's time zone (IANA, e.g. Europe/Berlin; default UTC)")
    a.add_argument(
        "--missed", choices=repeat.MISSED_POLICIES, default="once",
        help="a run due while no worker ran: once (runs late, once) or skip",
    )  # fmt: skip
    a.add_argument(
        "--grace", type=duration, default=repeat.DEFAULT_GRACE_MS / 1000,
        help="--missed skip: a run later than this is skipped (default 60s)",
    )  # fmt: skip
    a.add_argument("--priority", type=int, default=0, help="of its runs (-4095..4095)")
    a.add_argument("--max-attempts", type=positive_int, default=1, help="of its runs")
    a.add_argument("--create", action="store_true", help="make the queue if it does not exist")
    a.add_argument(
        "--codec",
        choices=("json", "msgpack"),
        default="json",
        help="the queue's codec, as its Queue(codec=...) (default json)",
    )

    action("remove", "delete a repeatable (its runs already enqueued stay)")
    action("pause", "stop a repeatable's runs until resumed")
    action("resume", "run a paused repeatable again, from its next slot after now")
