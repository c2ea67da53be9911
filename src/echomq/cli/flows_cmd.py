"""``echomq flows QUEUE``: a queue's flow parents. Without a flag, the waiting parents (the
longest waiting first); ``--held`` the held roots (flows whose producer stopped between
two pages: id, age, pages written, children written); ``--remove-held ID`` removes a held
root with its whole flow (docs/flows.md "Held roots"). The verbs are
``flows.waiting_parents``, ``flows.held_roots`` and ``flows.remove_held``, which refuses
a job that is not a held root: the general ``remove`` (a single job) or ``cancel`` is for
live flows."""

from __future__ import annotations

import argparse
import json
from typing import TYPE_CHECKING

from .. import flows
from .._wire.connection import Connection
from .common import DONE, Commands, positive_int
from .explain_text import span

if TYPE_CHECKING:
    from rich.console import Console

__all__ = ["register"]


def _limit(text: str) -> int:
    value = positive_int(text)
    if value > 1000:
        raise argparse.ArgumentTypeError(f"at most 1000 parents per call: {text!r}")
    return value


async def cmd_flows(conn: Connection, args: argparse.Namespace, out: Console) -> int:
    if args.remove_held is not None:
        removed = await flows.remove_held(conn, args.queue, args.remove_held)
        out.print(f"removed held flow {args.remove_held} of {args.queue}: {removed} job(s)")
        return DONE
    if args.held:
        return _print_held(await flows.held_roots(conn, args.queue, limit=args.limit), args, out)
    ids = await flows.waiting_parents(conn, args.queue, args.limit)
    if args.json:
        out.print_json(json.dumps(ids))
        return DONE
    if not ids:
        out.print(f"no flow parent of {args.queue} is waiting")
        return DONE
    out.print(f"flow parents of {args.queue} waiting for children, the longest first:")
    for i in ids:
        out.print(f"  {i}")
    return DONE


def _print_held(roots: list[flows.HeldRoot], args: argparse.Namespace, out: Console) -> int:
    if args.json:
        rows = [{"id": r.id, "age_ms": r.age_ms, "pages": r.pages, "kids": r.kids} for r in roots]
        out.print_json(json.dumps(rows))
        return DONE
    if not roots:
        out.print(f"no held flow root on {args.queue}")
        return DONE
    from rich import box
    from rich.table import Table

    title = f"held flow roots of {args.queue}"
    table = Table(title=title, box=box.SIMPLE_HEAD, show_edge=False, min_width=len(title))
    table.add_column("root", overflow="fold")
    table.add_column("held for", justify="right", no_wrap=True)
    table.add_column("pages written", justify="right", no_wrap=True)
    table.add_column("children written", justify="right", no_wrap=True)
    for r in roots:
        table.add_row(r.id, span(r.age_ms), str(r.pages), str(r.kids))
    out.print(table)
    out.print(f"remove one with its flow: echomq flows {args.queue} --remove-held ID")
    return DONE


def register(commands: Commands) -> None:
    p = commands.add(
        "flows",
        "a queue's waiting flow parents; --held: flows stopped between pages",
        queue="positional",
        run=cmd_flows,
    )
    which = p.add_mutually_exclusive_group()
    which.add_argument(
        "--held", action="store_true", help="the held roots: flows whose pages stopped coming"
    )
    which.add_argument("--remove-held", metavar="ID", help="remove a held root with its whole flow")
    p.add_argument("--limit", type=_limit, default=50, help="parents shown (default 50)")
    p.add_argument("--json", action="store_true", help="print JSON")
