"""``python -m benchmarks report``: the README tables, generated from one saved results file.

Every table names the commit it measured and the run it came from; ``--write`` replaces the
blocks between ``<!-- report:NAME begin -->`` and ``<!-- report:NAME end -->`` markers in
benchmarks/README.md and in the top-level README.md ("How fast"), so the figures a reader
sees are exactly the ones in the committed JSON. Ratios are taken within one repetition
(system / BullMQ Node of the same repetition) and their median is shown.
"""

from __future__ import annotations

import json
import math
import re
import statistics
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

__all__ = ["Report", "render_blocks", "render_ecosystem", "write_blocks"]

NODE = "bullmq-node"
# (key in a repetition's sample, column title, short title, higher is better)
MODES: tuple[tuple[str, str, str, bool], ...] = (
    ("drain10000_per_s", "drain 10,000 backlog, jobs/s", "drain 10k", True),
    ("drain100000_per_s", "drain 100,000 backlog, jobs/s", "drain 100k", True),
    ("jobs_per_s", "end to end, concurrent producer, jobs/s", "end to end", True),
    ("enqueue_per_s", "enqueue one at a time, jobs/s", "enqueue 1 by 1", True),
    ("bulk_per_s", "bulk enqueue (chunks of 1,000), jobs/s", "bulk", True),
    ("latency_p50_ms", "enqueue -> result p50, ms", "p50", False),
    ("latency_p99_ms", "p99, ms", "p99", False),
)


def _fmt(x: float, *, ms: bool = False) -> str:
    if math.isnan(x):
        return ""
    return f"{x:.2f}" if ms or x < 100 else f"{x:,.0f}"


def markdown(head: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines)


class Report:
    """One saved results file, read for the tables."""

    def __init__(self, path: Path) -> None:
        self.path = path
        data = json.loads(path.read_text())
        self.meta: dict[str, Any] = data["meta"]
        self.figures: dict[str, dict[str, Any]] = data["figures"]
        self.notes: list[str] = data.get("notes", [])
        self.samples: list[dict[str, Any]] = data.get("samples", [])

    # -- per-system samples ----------------------------------------------------------------

    def systems(self) -> list[str]:
        seen: list[str] = []
        for s in self.samples:
            name = s["system"]
            if name != "redis" and not name.startswith("echomq e2e") and name not in seen:
                seen.append(name)
        return seen

    def values(self, system: str, key: str) -> dict[int, float]:
        """``key`` of ``system`` by repetition."""
        return {
            s["rep"]: float(s[key])
            for s in self.samples
            if s["system"] == system and s.get(key) is not None
        }

    def median(self, system: str, key: str) -> float:
        v = list(self.values(system, key).values())
        return statistics.median(v) if v else math.nan

    def ratio(self, system: str, other: str, key: str) -> float:
        """Median over repetitions of system / other, both from the same repetition."""
        mine, theirs = self.values(system, key), self.values(other, key)
        r = [mine[i] / theirs[i] for i in mine if theirs.get(i)]
        return statistics.median(r) if r else math.nan

    def python_peers(self) -> list[str]:
        return [
            s for s in self.systems() if s not in ("echomq", NODE) and not s.startswith("echomq@")
        ]

    def before_after(self) -> str:
        """echomq at other commits (``--peer echomq@REV``) beside the tree measured, in the
        same rotation: medians, and the median of the per-repetition ratios."""
        befores = [s for s in self.systems() if s.startswith("echomq@")]
        if not befores:
            return "(no echomq@REV in this run)"
        head = ["", *(f"{b} ({self._commit(b)})" for b in befores), "echomq (this tree)"]
        head += [f"x {b}" for b in befores]
        rows = []
        for key, title, _, _ in MODES:
            mine = self.median("echomq", key)
            if math.isnan(mine):
                continue
            ms = key.endswith("_ms")
            rows.append(
                [
                    title,
                    *(_fmt(self.median(b, key), ms=ms) for b in befores),
                    f"**{_fmt(mine, ms=ms)}**",
                    *(_fmt_ratio(self.ratio("echomq", b, key)) for b in befores),
                ]
            )
        return markdown(head, rows) + (
            f"\n\nFrom `{self.path.as_posix()}`: this tree is src/echomq as of commit "
            f"{self.meta.get('echomq_src_commit', '?')}; each echomq@REV ran the same adapter "
            "from a `git archive` of that commit's src/, interleaved in every repetition; "
            f"medians of {self._reps()} repetitions (lower is better for the latencies)."
        )

    def _commit(self, system: str) -> str:
        v = self.meta.get(f"versions.{system}", {})
        return str(v.get("commit", "?")) if isinstance(v, dict) else "?"

    def best_python(self, key: str, higher: bool) -> tuple[str, float]:
        found = [(p, self.median(p, key)) for p in self.python_peers()]
        found = [f for f in found if not math.isnan(f[1])]
        if not found:
            return ("", math.nan)
        return (max if higher else min)(found, key=lambda f: f[1])

    # -- blocks ------------------------------------------------------------------------------

    def conditions(self) -> str:
        m = self.meta
        versions = "; ".join(
            f"{k.removeprefix('versions.')}: " + ", ".join(f"{p} {v}" for p, v in m[k].items())
            if isinstance(m[k], dict)
            else ""
            for k in sorted(m)
            if k.startswith("versions.") and not k.startswith("versions.echomq")
        )
        return (
            f"Generated by `python -m benchmarks report --from {self.path.as_posix()}` from the "
            f"run of {m.get('date', '?')}: **echomq {m.get('echomq', '?')}, src/echomq as of "
            f"commit {m.get('echomq_src_commit', '?')}** (the last commit that changed it; "
            f"the tree measured was {m.get('echomq_commit', '?')}), "
            f"`python -m benchmarks {m.get('argv', '')}`. "
            "Machine: "
            f"{m.get('cpus', '?')} CPUs, {m.get('platform', '?')}, Python {m.get('python', '?')},"
            f" {m.get('redis', '?').split(' sha=')[0]}; load average at the start "
            f"{m.get('load_average_at_start', '?')}, at the end {m.get('load_average_at_end', '?')}"
            f" (other sessions share the machine: read the ratios within the run). "
            f"Versions: {versions}."
        )

    def ceilings(self) -> str:
        rows = []
        for key, label in (
            ("ping_p16_c50", "PING, 50 clients, pipelined 16 deep (the server's ceiling)"),
            ("ping_p1_c1", "PING, 1 client, one round trip at a time"),
        ):
            v = list(self.values("redis", key).values())
            if v:
                rows.append(
                    (
                        label,
                        f"{statistics.median(v):,.0f}",
                        f"{min(v):,.0f}..{max(v):,.0f}",
                        ", ".join(f"{x:,.0f}" for x in v),
                    )
                )
        loads = [s.get("load", "") for s in self.samples if s["system"] == "redis"]
        head = ("redis-benchmark, fresh redis-server per repetition", "calls/s", "range", "by rep")
        out = markdown(head, rows)
        return out + (f"\n\nLoad average at each repetition's start: {'; '.join(loads)}.")

    def systems_table(self) -> str:
        head = ["system", *(title for _, title, _, _ in MODES), "round trips", "n"]
        rows = []
        for s in self.systems():
            n = max((len(self.values(s, k)) for k, _, _, _ in MODES), default=0)
            trips = list(self.values(s, "latency_n").values())
            cells = []
            for key, _, _, _ in MODES:
                med = self.median(s, key)
                if key == "bulk_per_s" and math.isnan(med) and s not in ("echomq", NODE):
                    cells.append("none")
                else:
                    cells.append(_fmt(med, ms=key.endswith("_ms")))
            name = f"**{s}**" if s in ("echomq", NODE) else s
            rows.append([name, *cells, f"{min(trips):.0f}" if trips else "", str(n)])
        return markdown(head, rows)

    def ratios_table(self) -> str:
        head = ["x BullMQ Node (within each repetition)", *(short for _, _, short, _ in MODES)]
        rows = []
        for s in self.systems():
            if s == NODE:
                continue
            cells = [_fmt_ratio(self.ratio(s, NODE, key)) for key, _, _, _ in MODES]
            rows.append([f"**{s}**" if s == "echomq" else s, *cells])
        return markdown(head, rows)

    def headline(self) -> str:
        """echomq vs BullMQ Node vs the best Python peer (per figure), with the ratios."""
        head = ("", "echomq", "BullMQ (Node)", "x BullMQ Node", "best Python peer", "x that peer")
        rows = []
        for key, title, _, higher in MODES:
            mine = self.median("echomq", key)
            if math.isnan(mine):
                continue
            peer, best = self.best_python(key, higher)
            ms = key.endswith("_ms")
            rows.append(
                (
                    title,
                    f"**{_fmt(mine, ms=ms)}**",
                    _fmt(self.median(NODE, key), ms=ms),
                    _fmt_ratio(self.ratio("echomq", NODE, key)),
                    f"{peer} {_fmt(best, ms=ms)}" if peer else "",
                    _fmt_ratio(self.ratio("echomq", peer, key)) if peer else "",
                )
            )
        claim = self.figures.get("claim count=1, 64 callers")
        if claim and claim.get("ratio_median") is not None:
            rows.append(
                (
                    "claim, 64 callers on one connection",
                    f"**{claim['ratio_median']:.0%}** of redis-benchmark's ceiling "
                    "for the same script",
                    "",
                    "",
                    "",
                    "",
                )
            )
        return markdown(head, rows) + (
            f"\n\nFrom `{self.path.as_posix()}`: echomq's src/echomq as of commit "
            f"{self.meta.get('echomq_src_commit', '?')}, run of "
            f"{self.meta.get('date', '?')}; medians of {self._reps()} repetitions; ratios are "
            "medians of per-repetition ratios (lower is better for the latencies)."
        )

    def _reps(self) -> int:
        return len(self.values("redis", "ping_p16_c50")) or 1

    def verbs_table(self) -> str:
        head = ("figure", "median", "unit", "range", "x ceiling", "ceiling", "n")
        rows = []
        for name, f in self.figures.items():
            if ":" in name and not name.startswith("ceiling:"):
                continue  # the per-system figures have their own tables
            if name.startswith("ceiling: PING -P"):
                continue
            v = f["values"]
            rows.append(
                (
                    name,
                    _fmt(f["median"]),
                    f["unit"],
                    f"{min(v):,.0f}..{max(v):,.0f}" if len(v) > 1 else "",
                    "" if f.get("ratio_median") is None else f"{f['ratio_median']:.2f}",
                    f.get("ceiling", ""),
                    str(len(v)),
                )
            )
        return markdown(head, rows)

    def e2e_table(self) -> str:
        head = ("echomq alone", "no-op jobs/s", "range", "p50 ms", "p99 ms", "producer share", "n")
        rows = []
        for label in ("echomq e2e, 1 worker process", "echomq e2e, 2 worker processes"):
            v = list(self.values(label, "jobs_per_s").values())
            if not v:
                continue
            share = [s["enqueue_s"] / s["total_s"] for s in self.samples if s["system"] == label]
            rows.append(
                (
                    label.removeprefix("echomq e2e, "),
                    f"{statistics.median(v):,.0f}",
                    f"{min(v):,.0f}..{max(v):,.0f}",
                    _fmt(self.median(label, "latency_p50_ms"), ms=True),
                    _fmt(self.median(label, "latency_p99_ms"), ms=True),
                    f"{statistics.median(share):.2f}",
                    str(len(v)),
                )
            )
        return markdown(head, rows)

    def targets(self) -> str:
        """Issue 18's targets (against BullMQ Node, ratios within the run) and issue 6's."""
        rows: list[tuple[str, str, str]] = []

        def verdict(ok: bool | None) -> str:
            return "n/a" if ok is None else ("met" if ok else "**missed**")

        def vs_node(key: str, title: str, need: float) -> None:
            r = self.ratio("echomq", NODE, key)
            ok = None if math.isnan(r) else r >= need
            rows.append((f"{title} >= {need:g}x BullMQ Node", _fmt_ratio(r), verdict(ok)))

        vs_node("jobs_per_s", "end to end, concurrent producer", 2)
        vs_node("drain10000_per_s", "drain a 10,000 backlog", 2)
        vs_node("drain100000_per_s", "drain a 100,000 backlog", 2)
        vs_node("enqueue_per_s", "enqueue one at a time", 1.5)
        vs_node("bulk_per_s", "bulk enqueue", 3)
        r = self.ratio("echomq", NODE, "latency_p50_ms")
        rows.append(
            (
                "enqueue -> result p50 <= BullMQ Node's",
                _fmt_ratio(r),
                verdict(None if math.isnan(r) else r <= 1),
            )
        )
        claim = self.figures.get("claim count=1, 64 callers")
        if claim and claim.get("ratio_median") is not None:
            r = float(claim["ratio_median"])
            rows.append(
                ("claim count=1, 64 callers >= 80% of its ceiling", f"{r:.0%}", verdict(r >= 0.8))
            )
            rows.append(("(issue 6) the same >= 40% of its ceiling", f"{r:.0%}", verdict(r >= 0.4)))
        c100 = self.figures.get("claim count=100, 64 callers")
        if c100 and c100.get("ratio_median") is not None:
            r = float(c100["ratio_median"])
            rows.append(
                (
                    "(issue 6) claim count=100 jobs/s >= the count=1 ceiling's calls/s",
                    f"x{r:.2f}",
                    verdict(r >= 1),
                )
            )
        for c in (1, 64):
            single = self.figures.get(f"extend_lock, {c} callers")
            batch = self.figures.get(f"extend_locks x100, {c} callers")
            if single and batch:
                x = batch["median"] / single["median"]
                rows.append(
                    (
                        f"(issue 6) extend_locks x100 >= 10x extend_lock, {c} callers",
                        f"x{x:.1f}",
                        verdict(x >= 10),
                    )
                )
        return markdown(("target", "measured (x = echomq / BullMQ Node)", ""), rows)

    def notes_block(self) -> str:
        no_bulk = self.meta.get("no_bulk", {})
        lines = [f"- {name}: {why}" for name, why in no_bulk.items()]
        skipped: dict[str, list[str]] = {}
        for s in self.samples:
            if "drain100000_skipped" in s:
                skipped.setdefault(s["system"], []).append(s["drain100000_skipped"])
        lines += [
            f"- {name}: no 100,000 drain (its 10,000 prefill + drain projected the 100,000 ones "
            f"past 2 minutes: {', '.join(why)})"
            for name, why in skipped.items()
        ]
        lines += [f"- failed: {n}" for n in self.notes]
        return "\n".join(lines) if lines else "(none)"


def _fmt_ratio(r: float) -> str:
    return "" if math.isnan(r) else f"x{r:.2f}"


BLOCKS: dict[str, Callable[[Report], str]] = {
    "conditions": Report.conditions,
    "ceilings": Report.ceilings,
    "systems": Report.systems_table,
    "ratios": Report.ratios_table,
    "notes": Report.notes_block,
    "headline": Report.headline,
    "targets": Report.targets,
    "verbs": Report.verbs_table,
    "e2e": Report.e2e_table,
    "before-after": Report.before_after,
}


def render_blocks(report: Report) -> dict[str, str]:
    return {name: make(report) for name, make in BLOCKS.items()}


# -- python -m benchmarks ecosystem (issue 17) ---------------------------------------------


def _figure(report: Report, name: str) -> dict[str, Any]:
    found = report.figures.get(name)
    if found is None:
        raise SystemExit(f"report: {report.path} has no figure {name!r}")
    return found


def _first(report: Report, prefix: str) -> dict[str, Any]:
    for name, fig in report.figures.items():
        if name.startswith(prefix):
            return fig
    raise SystemExit(f"report: {report.path} has no figure starting {prefix!r}")


def ecosystem_conditions(report: Report) -> str:
    m = report.meta
    return (
        f"Generated by `python -m benchmarks report --from {report.path.as_posix()}` from the "
        f"run of {m.get('date', '?')}: echomq {m.get('echomq', '?')}, src/echomq as of "
        f"commit {m.get('echomq_src_commit', '?')} (tree {m.get('echomq_commit', '?')}; "
        f"the e2e baseline is {m.get('baseline_commit', '?')}, main before this work), "
        f"`python -m benchmarks {m.get('argv', '')}`. Machine: {m.get('cpus', '?')} CPUs, "
        f"Python {m.get('python', '?')}, {m.get('redis', '?').split(' sha=')[0]}; load "
        f"average at the start {m.get('load_average_at_start', '?')}, at the end "
        f"{m.get('load_average_at_end', '?')} (a shared machine: read the ratios, taken "
        "within each repetition)."
    )


def ecosystem_table(report: Report) -> str:
    head = ("figure", "median", "unit", "range", "ratio (median)", "ratio to", "n")
    rows = []
    for name, f in report.figures.items():
        values = f["values"]
        fmt = "{:,.2f}" if abs(f["median"]) < 100 else "{:,.0f}"
        ratio = f.get("ratio_median")
        rows.append(
            (
                name,
                fmt.format(f["median"]),
                f["unit"],
                f"{fmt.format(min(values))}..{fmt.format(max(values))}" if values else "",
                "" if ratio is None else f"{ratio:.3f}",
                f.get("ceiling") or "",
                str(len(values)),
            )
        )
    return markdown(head, rows)


def ecosystem_headline(report: Report) -> str:
    one = _figure(report, "enqueue, asyncio, 1 caller(s)")
    many = _figure(report, "enqueue, asyncio, 64 caller(s)")
    trio1 = _figure(report, "enqueue, trio, 1 caller(s)")
    trio64 = _figure(report, "enqueue, trio, 64 caller(s)")
    blocking = _figure(report, "enqueue, blocking (delay_sync), 1 caller")
    scraped = _first(report, "e2e jobs/s, this tree, /metrics scraped")
    scraped_cpu = _first(report, "worker CPU per job, this tree, /metrics scraped")
    hooks = _figure(report, "e2e jobs/s, this tree, no opentelemetry")
    base = _first(report, "e2e jobs/s, baseline")
    ping = report.figures.get("ceiling: PING -P16 -c50", {}).get("median", math.nan)
    ping1 = report.figures.get("ceiling: PING -P1 -c1 (one round trip at a time)", {}).get(
        "median", math.nan
    )
    rows = [
        (
            "enqueue, 1 caller: asyncio (`adelay`) / trio (`delay`)",
            f"{one['median']:,.0f} / {trio1['median']:,.0f} jobs/s",
            f"x{one['ratio_median']:.2f}",
        ),
        (
            "enqueue, 64 callers: asyncio / trio",
            f"{many['median']:,.0f} / {trio64['median']:,.0f} jobs/s",
            f"x{many['ratio_median']:.2f}",
        ),
        ("enqueue, blocking (`delay_sync`), 1 caller", f"{blocking['median']:,.0f} jobs/s", ""),
        (
            "end to end no-op jobs/s, /metrics scraped every second / not served",
            f"{scraped['median']:,.0f} / {hooks['median']:,.0f}",
            f"x{scraped['ratio_median']:.2f} (worker CPU per job x"
            f"{scraped_cpu['ratio_median']:.2f})",
        ),
        (
            "end to end no-op jobs/s, this work / main before it",
            f"{hooks['median']:,.0f} / {base['median']:,.0f}",
            f"x{base['ratio_median']:.2f}",
        ),
        (
            "the machine's Redis ceiling, same run (redis-benchmark PING)",
            f"{ping:,.0f} calls/s pipelined, {ping1:,.0f} one at a time",
            "",
        ),
    ]
    n = len(one["values"])
    return (
        markdown(("issue 17's figures", "medians", "ratio (median of per-repetition)"), rows)
        + f"\n\nFrom `{report.path.as_posix()}` (src/echomq as of "
        f"{report.meta.get('echomq_src_commit', '?')}, run of {report.meta.get('date', '?')}, "
        f"{n} repetitions, load average {report.meta.get('load_average_at_start', '?')} at "
        "the start)."
    )


ECOSYSTEM_BLOCKS: dict[str, Callable[[Report], str]] = {
    "ecosystem-conditions": ecosystem_conditions,
    "ecosystem-headline": ecosystem_headline,
    "ecosystem-table": ecosystem_table,
    "ecosystem-ceilings": Report.ceilings,
}


def render_ecosystem(report: Report) -> dict[str, str]:
    return {name: make(report) for name, make in ECOSYSTEM_BLOCKS.items()}


def write_blocks(blocks: dict[str, str], path: Path) -> list[str]:
    """Replace each ``<!-- report:NAME begin -->...<!-- report:NAME end -->`` in ``path``;
    answer the names replaced."""
    text = path.read_text()
    done = []
    for name, body in blocks.items():
        pattern = re.compile(
            rf"(<!-- report:{name} begin -->\n)(?:.*?\n)?(<!-- report:{name} end -->)", re.S
        )
        text, n = pattern.subn(lambda m: m.group(1) + body + "\n" + m.group(2), text)  # noqa: B023
        if n:
            done.append(name)
    path.write_text(text)
    return done
