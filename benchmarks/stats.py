"""Figures over repetitions: medians, ratios to a ceiling, the printed table, the JSON.

Saving goes through :mod:`benchmarks.files`."""

from __future__ import annotations

import statistics
from typing import Any

import attrs

__all__ = ["Figure", "Results", "percentile"]


def percentile(values: list[float], p: float) -> float:
    """Nearest-rank percentile of ``values`` (p in 0..100)."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    rank = max(0, min(len(ordered) - 1, round(p / 100 * len(ordered) + 0.5) - 1))
    return ordered[rank]


@attrs.define
class Figure:
    """One measured quantity over repetitions, and the ceiling it is compared with."""

    name: str
    unit: str
    values: list[float] = attrs.field(factory=list)
    ratios: list[float] = attrs.field(factory=list)  # per repetition: value / ceiling
    ceiling: str = ""

    @property
    def median(self) -> float:
        return statistics.median(self.values) if self.values else float("nan")

    @property
    def ratio(self) -> float:
        return statistics.median(self.ratios) if self.ratios else float("nan")

    def spread(self) -> str:
        if len(self.values) < 2:
            return ""
        return f"{min(self.values):,.0f}..{max(self.values):,.0f}"


@attrs.define
class Results:
    """Figures in the order they were first measured; printable and saved as JSON."""

    figures: dict[str, Figure] = attrs.field(factory=dict)
    notes: list[str] = attrs.field(factory=list)
    meta: dict[str, Any] = attrs.field(factory=dict)
    samples: list[dict[str, Any]] = attrs.field(factory=list)  # raw, one per system and rep

    def add(
        self, name: str, value: float, unit: str, *, ceiling: float | None = None, of: str = ""
    ) -> None:
        fig = self.figures.setdefault(name, Figure(name, unit))
        fig.values.append(value)
        if ceiling:
            fig.ratios.append(value / ceiling)
            fig.ceiling = of

    def table(self, title: str = "") -> str:
        rows = [("figure", "median", "unit", "range", "x ceiling", "ceiling", "n")]
        for f in self.figures.values():
            ratio = f"{f.ratio:.2f}" if f.ratios else ""
            fmt = "{:,.2f}" if f.median < 100 else "{:,.0f}"
            rows.append(
                (
                    f.name,
                    fmt.format(f.median),
                    f.unit,
                    f.spread(),
                    ratio,
                    f.ceiling,
                    str(len(f.values)),
                )
            )
        widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
        lines = [title] if title else []
        for i, r in enumerate(rows):
            lines.append(
                "  ".join(
                    c.ljust(w) if j in (0, 2, 5) else c.rjust(w)
                    for j, (c, w) in enumerate(zip(r, widths, strict=True))
                )
            )
            if i == 0:
                lines.append("  ".join("-" * w for w in widths))
        return "\n".join([*lines, *(f"note: {n}" for n in self.notes)])

    def to_json(self) -> dict[str, Any]:
        return {
            "meta": self.meta,
            "notes": self.notes,
            "figures": {
                n: {
                    "unit": f.unit,
                    "median": f.median,
                    "values": f.values,
                    "ratio_median": f.ratio if f.ratios else None,
                    "ratios": f.ratios,
                    "ceiling": f.ceiling,
                }
                for n, f in self.figures.items()
            },
            "samples": self.samples,
        }

    def merge(self, other: Results) -> None:
        for name, fig in other.figures.items():
            mine = self.figures.setdefault(name, Figure(name, fig.unit, ceiling=fig.ceiling))
            mine.values += fig.values
            mine.ratios += fig.ratios
        self.notes += other.notes
        self.meta.update(other.meta)
        self.samples += other.samples
