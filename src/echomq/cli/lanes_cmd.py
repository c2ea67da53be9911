"""Lane commands (docs/lanes.md): ``limits`` (show or change a queue's limits at run time)
and ``groups`` (per-group counts and standing)."""

from __future__ import annotations

import argparse
import json
import re
from typing import TYPE_CHECKING

from .. import admin
from .._wire.connection import Connection
from .common import DONE, Commands, UsageError, positive_int
from .explain_text import span

if TYPE_CHECKING:
    from rich.console import Console

__all__ = ["parse_rate", "register"]

_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}
_RATE = re.compile(r"(\d+)/(\d*\.?\d*)(ms|s|m|h)")
NONE = "none"


def parse_rate(text: str) -> tuple[int, float] | None:
    """``100/s``, ``10/1.5s``, ``60/m``, ``5/250ms`` -> (jobs, seconds); ``none`` -> None."""
    if text == NONE:
        return None
    match = _RATE.fullmatch(text)
    if match is None:
        raise argparse.ArgumentTypeError(f"a rate is N/PERIOD (100/s, 10/1.5s, 60/m): {text!r}")
    amount = float(match[2]) if match[2] else 1.0
    return int(match[1]), amount * _UNITS[match[3]]


def _limit(text: str) -> int | None:
    """A limit: N, or ``none`` / ``0`` to clear it."""
    return None if text in (NONE, "0") else positive_int(text)


def _rate_text(rate: admin.RateLimit | None) -> str:
    if rate is None:
        return "-"
    sliding = " (sliding)" if rate.kind == "sliding" else ""
    return f"{rate.max_jobs} per {span(rate.period_ms)}{sliding}"


async def cmd_limits(conn: Connection, args: argparse.Namespace, out: Console) -> int:
    changing = args.concurrency is not None or args.rate is not None
    if args.rate_kind != "fixed" and args.rate is None:
        raise UsageError("--rate-kind goes with --rate")
    if args.group and args.every_group:
        raise UsageError("give --group or --every-group, not both")
    if changing:
        if args.concurrency is not None and not (args.group or args.every_group):
            await admin.set_concurrency(conn, args.queue, args.concurrency[0])
        elif args.concurrency is not None:
            await admin.set_group_concurrency(
                conn, args.queue, args.concurrency[0], group=args.group
            )
        if args.rate is not None:
            max_jobs, per = args.rate[0] if args.rate[0] is not None else (None, 1.0)
            await admin.set_rate_limit(
                conn,
                args.queue,
                max_jobs,
                per,
                group=args.group,
                every_group=args.every_group,
                kind=args.rate_kind,
            )
    if args.group:
        row = await admin.group(conn, args.queue, args.group)
        if args.json:
            out.print_json(json.dumps(_group_json(row)))
            return DONE
        own = " (its own)" if row.own_limit else " (the default)"
        out.print(f"group {row.name} of {args.queue}")
        out.print(f"  concurrency  {row.limit if row.limit is not None else 'no limit'}{own}")
        out.print(f"  rate         {_rate_text(row.rate)}{' (its own)' if row.own_rate else ''}")
        out.print(f"  waiting      {row.waiting}, active {row.active}")
        return DONE
    limits = await admin.limits(conn, args.queue)
    if args.json:
        out.print_json(
            json.dumps(
                {
                    "queue": args.queue,
                    "concurrency": limits.concurrency,
                    "rate": _rate_json(limits.rate),
                    "group_concurrency": limits.group_concurrency,
                    "group_rate": _rate_json(limits.group_rate),
                }
            )
        )
        return DONE
    out.print(f"limits of {args.queue}")
    cap = limits.concurrency
    out.print(f"  queue concurrency        {cap if cap is not None else 'no limit'}")
    out.print(f"  queue rate               {_rate_text(limits.rate)}")
    default = limits.group_concurrency
    out.print(f"  every group: concurrency {default if default is not None else 'no limit'}")
    out.print(f"  every group: rate        {_rate_text(limits.group_rate)}")
    return DONE


def _rate_json(rate: admin.RateLimit | None) -> dict[str, int | str] | None:
    if rate is None:
        return None
    return {"max_jobs": rate.max_jobs, "period_ms": rate.period_ms, "kind": rate.kind}


def _group_json(row: admin.GroupRow) -> dict[str, object]:
    return {
        "group": row.name,
        "waiting": row.waiting,
        "active": row.active,
        "limit": row.limit,
        "own_limit": row.own_limit,
        "rate": _rate_json(row.rate),
        "own_rate": row.own_rate,
        "in_ring": row.in_ring,
        "limited_until_ms": row.limited_until_ms,
    }


async def cmd_groups(conn: Connection, args: argparse.Namespace, out: Console) -> int:
    from rich import box
    from rich.table import Table

    rows = await admin.groups(conn, args.queue, after=args.after or "", limit=args.limit)
    if args.json:
        out.print_json(json.dumps([_group_json(r) for r in rows]))
        return DONE
    if not rows:
        out.print(f"no group of {args.queue} has waiting or active jobs")
        return DONE
    title = f"groups of {args.queue}"
    table = Table(title=title, box=box.SIMPLE_HEAD, show_edge=False, min_width=len(title))
    table.add_column("group", overflow="fold")
    for name in ("waiting", "active", "limit"):
        table.add_column(name, justify="right", no_wrap=True)
    table.add_column("rate", overflow="fold")
    table.add_column("now", overflow="fold")
    for r in rows:
        if r.at_limit:
            now = "[yellow]at its limit[/]"
        elif r.limited_until_ms is not None:
            now = "[yellow]rate window full[/]"
        elif r.in_ring:
            now = "[green]has a turn[/]"
        else:
            now = "idle"
        limit = "-" if r.limit is None else str(r.limit)
        table.add_row(r.name, str(r.waiting), str(r.active), limit, _rate_text(r.rate), now)
    out.print(table)
    if len(rows) == args.limit:
        out.print(f"more after {rows[-1].name}: --after {rows[-1].name}")
    return DONE


def register(commands: Commands) -> None:
    p = commands.add(
        "limits",
        "show or change a queue's concurrency and rate and its groups' limits (run time)",
        queue="positional",
        run=cmd_limits,
    )
    which = p.add_mutually_exclusive_group()
    which.add_argument("--group", help="one group's own limits")
    which.add_argument("--every-group", action="store_true", help="the default of every group")
    p.add_argument(
        "--concurrency",
        type=_limit,
        nargs=1,
        metavar="N|0",
        help="jobs running at once (0 or none: clear): the queue's, across every worker, "
        "unless --group or --every-group",
    )
    p.add_argument(
        "--rate",
        type=parse_rate,
        nargs=1,
        metavar="N/PERIOD|none",
        help="jobs started per period: 100/s, 10/1.5s, 60/m (none: clear); "
        "the queue's unless --group or --every-group",
    )
    p.add_argument(
        "--rate-kind",
        choices=admin.RATE_KINDS,
        default="fixed",
        help="fixed: windows aligned on the clock (the default); sliding: the last period, "
        "wherever it begins (no burst across an edge)",
    )
    p.add_argument("--json", action="store_true", help="print JSON")

    p = commands.add(
        "groups", "per-group counts: waiting, active, limits, standing",
        queue="positional", run=cmd_groups,
    )  # fmt: skip
    p.add_argument("--after", help="list the groups after this name (paging)")
    p.add_argument("--limit", type=positive_int, default=50, help="groups shown (default 50)")
    p.add_argument("--json", action="store_true", help="print JSON")
