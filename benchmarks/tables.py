"""Markdown for benchmarks/README.md: tables, numbers, and the line that says how a
published run was made. Renderers take a results file's JSON and answer markdown; they
never measure and never read the clock."""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Sequence
from typing import Any

__all__ = [
    "cell",
    "conditions",
    "figures",
    "grid",
    "markdown",
    "meta_of",
    "median",
    "num",
    "ratio",
    "span",
]


def markdown(head: Sequence[str], rows: Iterable[Sequence[str]]) -> str:
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines)


def num(x: float | None, digits: int | None = None) -> str:
    """``x`` for a table: thousands separated from 100 on, two decimals below (or
    ``digits``); empty when missing."""
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return ""
    if digits is not None:
        return f"{x:,.{digits}f}"
    return f"{x:,.0f}" if abs(x) >= 100 or float(x).is_integer() else f"{x:.2f}"


def ratio(x: float | None) -> str:
    return "" if x is None or math.isnan(x) else f"x{x:.2f}"


def median(values: Iterable[float]) -> float:
    found = list(values)
    return statistics.median(found) if found else math.nan


def span(values: Sequence[float], digits: int | None = None) -> str:
    """``min..max`` of two or more values."""
    if len(values) < 2:
        return ""
    return f"{num(min(values), digits)}..{num(max(values), digits)}"


def conditions(
    meta: dict[str, Any], *, reps: int | None = None, source: str = "", extra: str = ""
) -> str:
    """One line: when, on what, under which load, how many repetitions, from which file."""
    parts = [f"Run of {meta['date']}" if meta.get("date") else "A run"]
    machine = [f"{meta['cpus']} CPUs" if meta.get("cpus") else ""]
    if meta.get("python"):
        machine.append(f"Python {meta['python']}")
    if meta.get("redis"):
        machine.append(str(meta["redis"]).split(" sha=")[0])
    parts.append(", ".join(m for m in machine if m))
    load = meta.get("load_average_at_start")
    if load:
        end = meta.get("load_average_at_end")
        parts.append(f"load average {load} at the start" + (f", {end} at the end" if end else ""))
    if reps:
        parts.append(f"{reps} repetition{'s' if reps != 1 else ''}")
    line = "; ".join(p for p in parts if p) + "."
    if extra:
        line += " " + extra
    if source:
        line += f" From `{source}`."
    return line


def meta_of(doc: dict[str, Any]) -> dict[str, Any]:
    """The run's facts: ``doc["meta"]``, or those an older file keeps at its top level."""
    if isinstance(doc.get("meta"), dict):
        return dict(doc["meta"])
    meta: dict[str, Any] = {k: doc[k] for k in ("date", "cpus") if k in doc}
    load = doc.get("load_average")
    if isinstance(load, list) and load and isinstance(load[0], int | float):
        meta["load_average_at_start"] = " ".join(f"{x:.2f}" for x in load)
    return meta


def cell(figure: dict[str, Any]) -> str:
    """A saved figure (``Results.to_json``) as a cell: its median and range, or for a yes /
    no figure how many repetitions said yes."""
    values = figure["values"]
    if figure.get("unit") == "bool":
        yes = sum(1 for v in values if v)
        return f"{'yes' if yes == len(values) else '**no**'} ({yes}/{len(values)})"
    out = f"{num(figure['median'])} {figure.get('unit', '')}".rstrip()
    return out + (f" ({span(values)})" if len(values) > 1 else "")


def grid(found: dict[str, dict[str, Any]], columns: dict[str, str], *, first: str = "") -> str:
    """Figures named ``<column>: <row>`` as one row per ``<row>``, one column per prefix."""
    rows: dict[str, dict[str, str]] = {}
    for name, fig in found.items():
        prefix, _, row = name.partition(": ")
        if prefix in columns and row:
            rows.setdefault(row, {})[prefix] = cell(fig)
    body = [[row, *(cells.get(c, "") for c in columns)] for row, cells in rows.items()]
    return markdown([first, *columns.values()], body)


def figures(found: dict[str, dict[str, Any]], names: Iterable[str] | None = None) -> str:
    """Saved figures as rows: median, unit, range, ratio to what, repetitions."""
    head = ("figure", "median", "unit", "range", "ratio (median)", "ratio to", "n")
    rows = []
    for name in names if names is not None else found:
        f = found[name]
        r = f.get("ratio_median")
        rows.append(
            (
                name,
                num(f["median"]),
                f.get("unit", ""),
                span(f["values"]),
                "" if r is None else f"{r:.3f}",
                f.get("ceiling") or "",
                str(len(f["values"])),
            )
        )
    return markdown(head, rows)
