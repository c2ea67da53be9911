"""Issue 6's targets beside the measured figures (from one or more saved result files)."""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

__all__ = ["load", "targets_table"]


def load(paths: list[Path]) -> dict[str, dict[str, Any]]:
    """Merge the ``figures`` of saved result files (later files win on a name clash)."""
    figures: dict[str, dict[str, Any]] = {}
    for path in paths:
        figures.update(json.loads(path.read_text())["figures"])
    return figures


def _median(figs: dict[str, dict[str, Any]], name: str) -> float:
    f = figs.get(name)
    return float(f["median"]) if f else math.nan


def _ratio(figs: dict[str, dict[str, Any]], name: str) -> float:
    f = figs.get(name)
    return float(f["ratio_median"]) if f and f.get("ratio_median") is not None else math.nan


def _best(figs: dict[str, dict[str, Any]], suffix: str, *, low: bool = False) -> tuple[str, float]:
    found = [
        (n.split(":")[0], float(f["median"]))
        for n, f in figs.items()
        if n.endswith(suffix) and not n.startswith("echomq")
    ]
    if not found:
        return ("(no peer measured)", math.nan)
    return (min if low else max)(found, key=lambda x: x[1])


def targets_table(figs: dict[str, dict[str, Any]]) -> list[tuple[str, str, str, str]]:
    """Rows of (target, measured, against, met?)."""
    rows: list[tuple[str, str, str, str]] = []

    def row(target: str, measured: str, against: str, ok: bool | None) -> None:
        verdict = "n/a" if ok is None else ("met" if ok else "missed")
        rows.append((target, measured, against, verdict))

    r = _ratio(figs, "claim count=1, 64 callers")
    row(
        "claim count=1, 64 callers >= 40% of claim.lua EVALSHA ceiling",
        f"{r:.0%} ({_median(figs, 'claim count=1, 64 callers'):,.0f}/s)",
        f"ceiling {_median(figs, 'ceiling: claim.lua count=1 (deep pending)'):,.0f} calls/s",
        None if math.isnan(r) else r >= 0.40,
    )
    r = _ratio(figs, "claim count=100, 64 callers")
    row(
        "claim count=100 jobs/s >= the count=1 ceiling's calls/s",
        f"{_median(figs, 'claim count=100, 64 callers'):,.0f} jobs/s (x{r:.2f})",
        "same ceiling",
        None if math.isnan(r) else r >= 1.0,
    )
    for c in (1, 64):
        single = _median(figs, f"extend_lock, {c} callers")
        batch = _median(figs, f"extend_locks x100, {c} callers")
        x = batch / single if single else math.nan
        row(
            f"extend_locks x100 >= 10x extend_lock (leases/s), {c} callers",
            f"x{x:.1f} ({batch:,.0f} vs {single:,.0f})",
            "",
            None if math.isnan(x) else x >= 10,
        )
    peer, best = _best(figs, ": end-to-end no-op")
    mine = _median(figs, "echomq: end-to-end no-op")
    row(
        "end-to-end no-op jobs/s, 1 worker process >= 2x best peer",
        f"{mine:,.0f} jobs/s (x{mine / best:.2f})",
        f"{peer} {best:,.0f} jobs/s",
        None if math.isnan(mine / best) else mine >= 2 * best,
    )
    peer, best = _best(figs, ": enqueue, one at a time")
    mine = _median(figs, "echomq: enqueue, one at a time")
    row(
        "enqueue/s one at a time, one producer >= best peer",
        f"{mine:,.0f}/s",
        f"{peer} {best:,.0f}/s (issue: ~3,000/s)",
        None if math.isnan(mine / best) else mine >= best,
    )
    bulk = _median(figs, "enqueue_many x100, 1 caller")
    row(
        "bulk enqueue/s >= best peer (issue: ~13,000/s)",
        f"{bulk:,.0f}/s (x100 per call)",
        "13,000/s (issue's figure; peers' bulk not measured here)",
        None if math.isnan(bulk) else bulk >= 13_000,
    )
    peer, best = _best(figs, ": enqueue->result p50", low=True)
    mine = _median(figs, "echomq: enqueue->result p50")
    row(
        "enqueue -> result p50 <= best peer's",
        f"{mine:.2f} ms",
        f"{peer} {best:.2f} ms",
        None if math.isnan(mine / best) else mine <= best,
    )
    return rows


def render(rows: list[tuple[str, str, str, str]]) -> str:
    head = ("target (issue 6)", "measured (median)", "against", "")
    widths = [max(len(r[i]) for r in [head, *rows]) for i in range(4)]
    lines = ["  ".join(c.ljust(w) for c, w in zip(head, widths, strict=True))]
    lines.append("  ".join("-" * w for w in widths))
    lines += ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)) for r in rows]
    return "\n".join(lines)


def e2e_rows(figs: dict[str, dict[str, Any]]) -> list[tuple[str, ...]]:
    """One row per system: jobs/s end to end, x best peer, enqueue/s, latency p50 and p99."""
    systems = sorted(
        {n.split(":")[0] for n in figs if n.endswith(": end-to-end no-op")},
        key=lambda s: -_median(figs, f"{s}: end-to-end no-op"),
    )
    _, best = _best(figs, ": end-to-end no-op")
    rows: list[tuple[str, ...]] = []
    for s in systems:
        jobs = figs[f"{s}: end-to-end no-op"]
        spread = f"{min(jobs['values']):,.0f}..{max(jobs['values']):,.0f}"
        enq = _median(figs, f"{s}: enqueue, one at a time")
        p50 = _median(figs, f"{s}: enqueue->result p50")
        p99 = _median(figs, f"{s}: enqueue->result p99")
        rows.append(
            (
                s,
                f"{jobs['median']:,.0f}",
                spread,
                f"{jobs['median'] / best:.2f}",
                "" if math.isnan(enq) else f"{enq:,.0f}",
                "" if math.isnan(p50) else f"{p50:.2f}",
                "" if math.isnan(p99) else f"{p99:.2f}",
                str(len(jobs["values"])),
            )
        )
    return rows


def markdown(head: tuple[str, ...], rows: Sequence[tuple[str, ...]]) -> str:
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines)


E2E_HEAD = (
    "system",
    "no-op jobs/s (median)",
    "range",
    "x best peer",
    "enqueue/s one at a time",
    "enqueue->result p50 ms",
    "p99 ms",
    "n",
)
TARGET_HEAD = ("target (issue 6)", "measured (median)", "against", "")
