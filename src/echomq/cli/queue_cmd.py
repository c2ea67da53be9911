"""Queue-scope commands: ``status``, ``pause``, ``resume``, ``drain``, ``obliterate``,
``retention``."""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from .. import admin
from .._model.spans import span_ms
from .._scripts.calls import SCHEMA_VERSION
from .._scripts.keyspace import Keyspace
from .._wire.connection import Connection
from ..config import parse_url
from ..errors import NotPaused
from .common import DONE, Commands, checked, positive_int, url_of

if TYPE_CHECKING:
    from rich.console import Console
    from rich.table import Table

__all__ = ["register"]

BUDGET_HELP = f"jobs deleted per call, 1..{admin.MAX_BUDGET} (default %(default)s)"


def _minutes(text: str) -> int:
    value = positive_int(text)
    if value >= admin.MAX_STATS_MINUTES:
        raise argparse.ArgumentTypeError(f"at most {admin.MAX_STATS_MINUTES - 1} minutes: {text!r}")
    return value


def _budget(text: str) -> int:
    value = positive_int(text)
    if value > admin.MAX_BUDGET:
        raise argparse.ArgumentTypeError(f"at most {admin.MAX_BUDGET} jobs per call: {text!r}")
    return value


def _status_json(s: admin.QueueStats) -> dict[str, Any]:
    return {
        "queue": s.queue,
        "paused": s.paused,
        "pending": s.pending,
        "grouped": s.grouped,
        "groups": s.groups,
        "scheduled": s.scheduled,
        "waiting": s.waiting,
        "active": s.active,
        "dead": s.dead,
        "completed": s.completed,
        "cancelled": s.cancelled,
        "completed_total": s.completed_total,
        "dead_total": s.dead_total,
        "cancelled_total": s.cancelled_total,
        "expired_total": s.expired_total,
        "completed_last_minute": s.completed_last_minute,
        "dead_last_minute": s.last_minute("dead"),
        "per_minute": {
            "completed": list(s.completed_per_minute),
            "dead": list(s.dead_per_minute),
            "cancelled": list(s.cancelled_per_minute),
        },
        "capped": {
            "completed": s.capped.completed,
            "dead": s.capped.dead,
            "completions": s.capped.completions,
            "cancelled": s.capped.cancelled,
        },
        "repeats": s.repeats,
        "repeats_paused": s.repeats_paused,
    }


def _n(value: int) -> str:
    return f"{value:,}"


def _state(s: admin.QueueStats) -> str:
    return "[yellow]paused[/]" if s.paused else "[green]running[/]"


def _repeats(s: admin.QueueStats) -> str:
    return f"{s.repeats} ({s.repeats_paused} paused)" if s.repeats_paused else str(s.repeats)


#: the table's columns: (header, the figure of a queue); ``--wide`` adds the rest
_NARROW: tuple[tuple[str, Callable[[admin.QueueStats, int], str]], ...] = (
    ("pending", lambda s, m: _n(s.pending)),
    ("active", lambda s, m: _n(s.active)),
    ("scheduled", lambda s, m: _n(s.scheduled)),
    ("dead", lambda s, m: f"[red]{_n(s.dead)}[/]" if s.dead else "0"),
    ("done/min", lambda s, m: _n(s.completed_last_minute)),
)
_WIDE: tuple[tuple[str, Callable[[admin.QueueStats, int], str]], ...] = (
    ("pending", lambda s, m: _n(s.pending)),
    ("scheduled", lambda s, m: _n(s.scheduled)),
    ("waiting", lambda s, m: _n(s.waiting)),
    ("active", lambda s, m: _n(s.active)),
    ("dead", lambda s, m: f"[red]{_n(s.dead)}[/]" if s.dead else "0"),
    ("completed", lambda s, m: _n(s.completed)),
    ("cancelled", lambda s, m: _n(s.cancelled)),
    ("done (total)", lambda s, m: _n(s.completed_total)),
    ("dead (total)", lambda s, m: _n(s.dead_total)),
    ("expired (total)", lambda s, m: _n(s.expired_total)),
    ("done/min", lambda s, m: _n(s.completed_last_minute)),
    ("dead/min", lambda s, m: f"[red]{_n(f)}[/]" if (f := s.last_minute("dead")) else "0"),
    ("done/min ({m}m)", lambda s, m: f"{s.rate('completed'):.1f}"),
    ("repeat", lambda s, m: _repeats(s)),
    ("groups", lambda s, m: _n(s.groups) if s.groups else "-"),
)


def _table(rows: list[admin.QueueStats], where: str, minutes: int, wide: bool) -> Table:
    """One line per queue. The numbers never wrap and the headers are never cut: the
    queue's name folds when the terminal is narrow (``--wide`` prints at its full width)."""
    from rich import box
    from rich.table import Table

    title = f"echomq at {where}"
    table = Table(title=title, box=box.SIMPLE_HEAD, show_edge=False, min_width=len(title))
    table.add_column("queue", overflow="fold", min_width=5)
    table.add_column("state", no_wrap=True)
    for header, _ in _WIDE if wide else _NARROW:
        header = header.format(m=minutes)
        table.add_column(header, justify="right", no_wrap=True, min_width=len(header))
    for s in rows:
        figures = [figure(s, minutes) for _, figure in (_WIDE if wide else _NARROW)]
        table.add_row(s.queue, _state(s), *figures)
    return table


def _vertical(s: admin.QueueStats, minutes: int) -> list[tuple[str, str]]:
    """Every figure of one queue, one per line."""
    lanes = f" ({_n(s.grouped)} in {_n(s.groups)} group lanes)" if s.grouped else ""
    return [
        ("queue", s.queue),
        ("state", _state(s)),
        ("pending", _n(s.pending) + lanes),
        ("scheduled", _n(s.scheduled)),
        ("waiting", f"{_n(s.waiting)} (flow parents with open children)"),
        ("active", _n(s.active)),
        ("dead", f"[red]{_n(s.dead)}[/]" if s.dead else "0"),
        ("completed", f"{_n(s.completed)} (rows kept by the retention)"),
        ("cancelled", f"{_n(s.cancelled)} (rows kept by the retention)"),
        ("done (total)", _n(s.completed_total)),
        ("dead (total)", _n(s.dead_total)),
        ("cancelled (total)", _n(s.cancelled_total)),
        ("expired (total)", f"{_n(s.expired_total)} (not started by their deadline)"),
        ("done/min", f"{_n(s.completed_last_minute)} (the last 60 s)"),
        ("dead/min", f"{_n(s.last_minute('dead'))} (the last 60 s)"),
        ("done/min avg", f"{s.rate('completed'):.1f} (the last {minutes} full minutes)"),
        ("repeatables", _repeats(s)),
        ("groups", f"{_n(s.groups)} with waiting or active jobs"),
    ]


async def cmd_status(conn: Connection, args: argparse.Namespace, out: Console) -> int:
    queues = [args.queue] if args.queue else await admin.list_queues(conn)
    minutes = args.minutes + 1  # the full minutes asked, and the current one
    rows = [await admin.stats(conn, q, minutes=minutes) for q in queues]
    if args.json:
        out.print_json(json.dumps([_status_json(s) for s in rows]))
        return DONE
    where = parse_url(url_of(args)).display
    if not rows:
        out.print(f"no queues at {where}")
        return DONE
    if args.queue:
        for label, value in _vertical(rows[0], args.minutes):
            out.print(f"{label:<18} {value}")
    else:
        table = _table(rows, where, args.minutes, args.wide)
        if args.wide:  # as wide as the columns need: a narrow terminal wraps the lines
            from rich.measure import Measurement

            needed = Measurement.get(out, out.options.update_width(10_000), table).maximum
            out.width = max(out.width, needed)
        out.print(table)
    for s in rows:
        if s.capped.total:
            out.print(
                f"[yellow]{s.queue}: the retention's count guard deleted {s.capped.completed} "
                f"completed rows, {s.capped.dead} dead rows and {s.capped.completions} "
                "completions entries before their time (echomq retention --help)[/]"
            )
    return DONE


_TIMES = ("keep_result", "keep_dead", "completions_keep")
_COUNTS = ("completions_max", "max_completed", "max_dead", "max_log_lines")
_FLAGS = ("keep_payload",)
_ALL = (*_TIMES, *_COUNTS, *_FLAGS)


def _span(text: str) -> float:
    ms = span_ms(text)
    if ms is None:
        raise argparse.ArgumentTypeError(f"not a span of time (90s, 30m, 1h30m, 2d, 1w): {text!r}")
    return ms / 1000


def _count(text: str) -> int:
    try:
        return int(text.replace("_", "").replace(",", ""))
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None


def _on_off(text: str) -> bool:
    if text in ("on", "off"):
        return text == "on"
    raise argparse.ArgumentTypeError(f"on or off, not {text!r}")


def _show_span(seconds: float) -> str:
    for unit, size in (("d", 86_400), ("h", 3_600), ("m", 60), ("s", 1)):
        if seconds >= size and seconds % size == 0:
            return f"{seconds / size:g}{unit}"
    return f"{seconds:g}s"


async def cmd_retention(conn: Connection, args: argparse.Namespace, out: Console) -> int:
    changes: dict[str, object] = {
        name: getattr(args, name) for name in _ALL if getattr(args, name) is not None
    }
    for name in args.reset or ():
        changes[name] = None
    if changes:
        await admin.set_retention(conn, args.queue, **changes)
    r = await admin.retention(conn, args.queue)
    if args.json:
        out.print_json(json.dumps({**{n: getattr(r, n) for n in _ALL},
                                   "explicit": sorted(r.explicit)}))  # fmt: skip
        return DONE
    for name in _ALL:
        value = getattr(r, name)
        if name in _FLAGS:
            shown = "on" if value else "off"
        else:
            shown = _show_span(value) if name in _TIMES else f"{value:,}"
        origin = "set" if name in r.explicit else "default"
        out.print(f"{name:17} {shown:>12}  ({origin})")
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


async def cmd_migrate(conn: Connection, args: argparse.Namespace, out: Console) -> int:
    found = await conn.execute("HGET", Keyspace(args.queue).meta, "schema_version")
    rewritten = await admin.migrate(conn, args.queue, budget=args.budget)
    was = found.decode() if found is not None else "none"
    if was == str(SCHEMA_VERSION):
        out.print(f"queue {args.queue} has data layout version {SCHEMA_VERSION}: nothing to do")
    else:
        out.print(
            f"migrated {args.queue} from data layout version {was} to {SCHEMA_VERSION}: "
            f"{rewritten} row(s) rewritten"
        )
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
    p = commands.add(
        "status",
        "counts per state and throughput: a line per queue (QUEUE: its every figure)",
        run=checked(cmd_status),  # an optional queue
    )
    p.add_argument("queue", nargs="?", help="one queue, every figure (default: every queue)")
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    p.add_argument(
        "--wide", action="store_true",
        help="every column (totals, dead/min, repeatables, groups) at its full width",
    )  # fmt: skip
    p.add_argument(
        "--minutes", type=_minutes, default=5,
        help="the window of the average done/min, in full minutes (default %(default)s)",
    )  # fmt: skip

    p = commands.add(
        "retention",
        "show or set how long finished jobs, completions entries and logs are kept",
        queue="positional", run=cmd_retention,
    )  # fmt: skip
    for name in _TIMES:
        p.add_argument(
            "--" + name.replace("_", "-"), dest=name, type=_span, metavar="SPAN",
            help=f"{name}: a span of time (90s, 30m, 1h30m, 2d, 1w; 0s = not kept)",
        )  # fmt: skip
    for name in _COUNTS:
        p.add_argument(
            "--" + name.replace("_", "-"), dest=name, type=_count, metavar="N",
            help=f"{name}: a count (the memory guard)",
        )  # fmt: skip
    p.add_argument(
        "--keep-payload", dest="keep_payload", type=_on_off, metavar="on|off",
        help="whether a completed or cancelled job's row keeps its payload (default on)",
    )  # fmt: skip
    p.add_argument(
        "--reset", action="append", choices=_ALL, metavar="NAME",
        help="back to the default (repeatable)",
    )  # fmt: skip
    p.add_argument("--json", action="store_true", help="print JSON")

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
        "migrate", "rewrite a queue of an older data layout (stop its old workers first)",
        queue="positional", run=cmd_migrate,
    )  # fmt: skip
    p.add_argument(
        "--budget", type=_budget, default=admin.DEFAULT_BUDGET,
        help=f"keys read per call, 1..{admin.MAX_BUDGET} (default %(default)s)",
    )  # fmt: skip

    p = commands.add(
        "obliterate", "delete a paused queue and every key of it",
        queue="positional", run=cmd_obliterate,
    )  # fmt: skip
    p.add_argument("--force", action="store_true", help="delete jobs in flight too")
    p.add_argument("--budget", type=_budget, default=admin.DEFAULT_BUDGET, help=BUDGET_HELP)
