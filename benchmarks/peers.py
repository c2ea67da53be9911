"""echomq beside BullMQ on Node and nine Python task queues, every mode, in one rotation.

    python -m benchmarks peers [--peer echomq --peer bullmq-node ...] [--reps 5] [--publish]
        [--io-jobs 30000 --io-sleep-ms 10 --io-concurrency 1000] [--enqueue-turns 3]

Per repetition: redis-benchmark's ceiling on a fresh server; the one-at-a-time enqueue
(one producer awaiting each call, no worker) ``--enqueue-turns`` times per system, the
systems in turns (rotating), each on a fresh server; then every system in turn
(``--peer NAME``, repeatable; default echomq and every peer of :data:`benchmarks.adapters.PEERS`;
``echomq@REV`` runs echomq's adapter on REV's src/ in the same rotation), each mode on a
fresh private redis-server (:mod:`benchmarks.harness`): bulk enqueue, end to end with a
concurrent producer, enqueue -> result latency, drain a no-op backlog, and (echomq and
BullMQ Node) the I/O-bound drain: a backlog of ``--io-jobs`` jobs that each await a sleep
of ``--io-sleep-ms``, drained by a fresh worker of concurrency ``--io-concurrency``. Every
drain also reports, over the window of its rate, the CPU per job of the worker and of
redis-server (/proc utime + stime) and Redis's memory per finished job kept (used_memory
when all are done minus before the backlog, over N; default retention). The peers'
packages install themselves at run time into ``benchmarks/.peers/`` (ignored).
"""

from __future__ import annotations

import argparse
import math
import re
import statistics
from typing import Any

import trio

import echomq

from . import files, harness, machine, tables, turns
from .adapters import NO_BULK, PEERS
from .adapters.venvs import ensure, versions
from .stats import Results

__all__ = ["main", "readme", "run"]

NODE = "bullmq-node"
# (key in a repetition's sample, column title, short title, higher is better); the drains'
# columns come from the sizes a run measured (``drain<N>_per_s``), ahead of these
MODES: tuple[tuple[str, str, str, bool], ...] = (
    ("jobs_per_s", "end to end, concurrent producer, jobs/s", "end to end", True),
    ("enqueue_per_s", "enqueue one at a time, jobs/s", "enqueue one at a time", True),
    ("bulk_per_s", "bulk enqueue (chunks of 1,000), jobs/s", "bulk", True),
    ("latency_p50_ms", "enqueue -> result p50, ms", "p50", False),
    ("latency_p99_ms", "enqueue -> result p99, ms", "p99", False),
)
DRAIN = re.compile(r"^drain(\d+)_per_s$")


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m benchmarks peers",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "--peer",
        action="append",
        metavar="NAME",
        help=f"only these systems (repeatable): echomq, echomq@REV, {', '.join(PEERS)}",
    )
    harness.add_arguments(p)
    harness.add_io_arguments(p)
    p.add_argument(
        "--enqueue-turns",
        type=int,
        default=3,
        help="one-at-a-time enqueue runs per system and repetition, in turns (default 3)",
    )
    files.add_arguments(p, reps=5)
    return p


ENQUEUE_JOBS = 2000  # the one-at-a-time enqueue: at most this many jobs per turn
ADAPTER_MODES = ("bulk", "produce", "latency", "drain", "io")  # after the enqueue turns


async def enqueue_turns(
    names: list[str], args: argparse.Namespace, rep: int, res: Results
) -> dict[str, list[float | None]]:
    """The one-at-a-time enqueue, ``--enqueue-turns`` runs of every system in this
    repetition, the order rotating per turn; a failed run is None (so that turn ``i`` of two
    systems stay side by side)."""
    found: dict[str, list[float | None]] = {n: [] for n in names}
    jobs = min(args.jobs, ENQUEUE_JOBS)
    for t in range(args.enqueue_turns):
        for name in turns.rotate(names, rep * args.enqueue_turns + t):
            try:
                rate: float | None = await harness.enqueue_once(name, args, jobs)
            except Exception as exc:
                res.notes.append(f"{name} rep {rep + 1} enqueue turn {t + 1}: {exc}"[:600])
                rate = None
            found[name].append(rate)
    machine.log(
        f"enqueue turns rep {rep + 1}: "
        + "; ".join(f"{n} {' '.join(f'{r:,.0f}' for r in v if r)}" for n, v in found.items())
    )
    return found


async def run(args: argparse.Namespace) -> Results:
    log = machine.log
    names: list[str] = args.peer or ["echomq", *PEERS]
    res = Results()
    for name in list(names):
        if name == "echomq":
            res.meta["versions.echomq"] = {"echomq": echomq.__version__}
            continue
        if name.startswith("echomq@"):
            snap = await trio.to_thread.run_sync(harness.echomq_snapshot, name)
            res.meta[f"versions.{name}"] = {"commit": (snap / "COMMIT").read_text().strip()}
            continue
        if name not in PEERS:
            raise SystemExit(f"peers: no peer {name!r} (known: {', '.join(PEERS)})")
        try:
            await trio.to_thread.run_sync(ensure, PEERS[name])
            res.meta[f"versions.{name}"] = versions(PEERS[name])
        except Exception as exc:  # a peer that cannot install is recorded, not fatal
            res.notes.append(f"{name}: could not install: {exc!r}")
            names.remove(name)
    res.meta["no_bulk"] = {n: NO_BULK[n] for n in names if n in NO_BULK}
    if args.io_jobs > 0:
        res.meta["io_drain"] = {
            "jobs": args.io_jobs,
            "sleep_ms": args.io_sleep_ms,
            "concurrency": args.io_concurrency,
        }
    for rep in range(args.reps):  # systems interleaved, so each repetition shares the load
        await harness.ceilings(rep, res, log=log)
        enqueues = await enqueue_turns(names, args, rep, res) if args.enqueue_turns > 0 else {}
        for name in names:
            try:
                figs = await harness.run_adapter(name, args, rep=rep, modes=ADAPTER_MODES, log=log)
            except Exception as exc:
                res.notes.append(f"{name} rep {rep + 1}: {exc}")
                log(f"{name}: FAILED {exc}")
                continue
            rates = enqueues.get(name, [])
            if any(r is not None for r in rates):
                figs["enqueue_turns_per_s"] = rates
                figs["enqueue_per_s"] = statistics.median(r for r in rates if r is not None)
            harness.record(res, name, figs, rep=rep)
            res.notes += [f"{name} rep {rep + 1} {e}" for e in figs.get("errors", [])]
    return res


def main(argv: list[str] | None = None) -> None:
    args = parser().parse_args(argv)
    meta = machine.describe("peers", argv)
    res = trio.run(run, args)
    res.meta = machine.finish({**meta, **res.meta})
    print(res.table("every system, every mode"), flush=True)
    files.save("peers", res.to_json(), args)
    print(readme(res.to_json(), "this run"))


# -- the README ----------------------------------------------------------------------------


class _Run:
    """One results file's samples, by system and repetition."""

    def __init__(self, doc: dict[str, Any]) -> None:
        self.meta: dict[str, Any] = doc["meta"]
        self.notes: list[str] = doc.get("notes", [])
        self.samples: list[dict[str, Any]] = doc.get("samples", [])

    def systems(self) -> list[str]:
        seen: list[str] = []
        for s in self.samples:
            name = s["system"]
            if name != "redis" and not name.startswith("echomq e2e") and name not in seen:
                seen.append(name)
        return seen

    def values(self, system: str, key: str) -> dict[int, float]:
        return {
            s["rep"]: float(s[key])
            for s in self.samples
            if s["system"] == system and s.get(key) is not None
        }

    def median(self, system: str, key: str) -> float:
        return tables.median(self.values(system, key).values())

    def ratio(self, system: str, other: str, key: str) -> float:
        """Median over repetitions of system / other, both from the same repetition."""
        mine, theirs = self.values(system, key), self.values(other, key)
        r = [mine[i] / theirs[i] for i in mine if theirs.get(i)]
        return statistics.median(r) if r else math.nan

    def reps(self) -> int:
        return len(self.values("redis", "ping_p16_c50")) or 1

    def modes(self) -> list[tuple[str, str, str, bool]]:
        """The drains this run measured, smallest first, then :data:`MODES`."""
        sizes = sorted({int(m[1]) for s in self.samples for k in s if (m := DRAIN.match(k))})
        drains = [
            (f"drain{n}_per_s", f"drain {n:,} backlog, jobs/s", f"drain {n:,}", True) for n in sizes
        ]
        return [*drains, *MODES]


def _cell(x: float, key: str) -> str:
    return tables.num(x, 2 if key.endswith("_ms") else None)


def _systems(run: _Run) -> str:
    modes = run.modes()
    head = ["system", *(title for _, title, _, _ in modes), "round trips", "n"]
    rows = []
    for s in run.systems():
        n = max((len(run.values(s, k)) for k, _, _, _ in modes), default=0)
        trips = list(run.values(s, "latency_n").values())
        cells = []
        for key, _, _, _ in modes:
            med = run.median(s, key)
            none = key == "bulk_per_s" and math.isnan(med) and s in NO_BULK
            cells.append("none" if none else _cell(med, key))
        name = f"**{s}**" if s in ("echomq", NODE) else s
        rows.append([name, *cells, f"{min(trips):.0f}" if trips else "", str(n)])
    return tables.markdown(head, rows)


def _ratios(run: _Run) -> str:
    modes = run.modes()
    head = ["x BullMQ Node, within each repetition", *(short for _, _, short, _ in modes)]
    rows = []
    for s in run.systems():
        if s == NODE:
            continue
        cells = [tables.ratio(run.ratio(s, NODE, key)) for key, _, _, _ in modes]
        rows.append([f"**{s}**" if s == "echomq" else s, *cells])
    return tables.markdown(head, rows)


def _per_rep(run: _Run) -> str:
    """echomq / BullMQ Node in each repetition, so the spread shows beside the median."""
    modes = run.modes()
    head = ["echomq / BullMQ Node", *(short for _, _, short, _ in modes)]
    cells = []
    for key, _, _, _ in modes:
        mine, theirs = run.values("echomq", key), run.values(NODE, key)
        cells.append(" ".join(f"{mine[i] / theirs[i]:.2f}" for i in sorted(mine) if theirs.get(i)))
    return tables.markdown(head, [["each repetition", *cells]])


# per drain, the figures taken over its window: (sample key suffix, column title)
PER_JOB: tuple[tuple[str, str], ...] = (
    ("per_s", "jobs/s"),
    ("worker_us_per_job", "worker CPU per job, µs"),
    ("redis_us_per_job", "Redis CPU per job, µs"),
    ("mem_b_per_job", "Redis memory per finished job kept, B"),
)


def _drains(run: _Run) -> list[tuple[str, str]]:
    """(sample key prefix, label) of the drains whose per-job figures this run has."""
    found = []
    for key, _, short, _ in run.modes():
        m = DRAIN.match(key)
        if m and any(f"drain{m[1]}_worker_us_per_job" in s for s in run.samples):
            found.append((f"drain{m[1]}", f"{short} no-op"))
    io = run.meta.get("io_drain")
    if any("io_per_s" in s for s in run.samples):
        label = "I/O-bound drain"
        if isinstance(io, dict):
            label = (
                f"drain {io['jobs']:,}, each job awaits {tables.num(io['sleep_ms'])} ms, "
                f"concurrency {io['concurrency']:,}"
            )
        found.append(("io", label))
    return found


def _per_job(run: _Run) -> str:
    """Each drain's rate with the CPU per job of the worker and of Redis and the memory per
    kept job, by system; then echomq / BullMQ Node within each repetition."""
    drains = _drains(run)
    head = ["drain", "system", *(title for _, title in PER_JOB), "n"]
    rows = []
    for prefix, label in drains:
        for s in run.systems():
            n = len(run.values(s, f"{prefix}_per_s"))
            if not n:
                continue
            cells = [tables.num(run.median(s, f"{prefix}_{key}")) for key, _ in PER_JOB]
            name = f"**{s}**" if s in ("echomq", NODE) else s
            rows.append([label, name, *cells, str(n)])
    out = tables.markdown(head, rows)
    if NODE not in run.systems() or "echomq" not in run.systems():
        return out
    head = ["echomq / BullMQ Node, within each repetition", *(t for _, t in PER_JOB)]
    rows = []
    for prefix, label in drains:
        cells = []
        for key, _ in PER_JOB:
            each = _pairs(run, f"{prefix}_{key}")
            med = statistics.median(each) if each else math.nan
            cells.append(tables.ratio(med) + (f" ({tables.span(each)})" if len(each) > 1 else ""))
        rows.append([label, *cells])
    return out + "\n\n" + tables.markdown(head, rows)


def _pairs(run: _Run, key: str) -> list[float]:
    """echomq / BullMQ Node of ``key`` in each repetition that has both."""
    mine, theirs = run.values("echomq", key), run.values(NODE, key)
    return [mine[i] / theirs[i] for i in sorted(mine) if theirs.get(i)]


def _turns(run: _Run, system: str) -> list[float | None]:
    """Every one-at-a-time enqueue turn of ``system``, repetition by repetition."""
    out: list[float | None] = []
    for s in sorted(run.samples, key=lambda s: s["rep"]):
        if s["system"] == system:
            out += s.get("enqueue_turns_per_s", [])
    return out


def _enqueue(run: _Run) -> str:
    """The spread of the one-at-a-time enqueue over every turn, and of echomq / BullMQ Node
    turn by turn."""
    head = ["one producer awaiting each enqueue", "turns", "min", "median", "max"]
    rows = []
    for s in run.systems():
        v = [x for x in _turns(run, s) if x is not None]
        if v:
            name = f"**{s}**" if s in ("echomq", NODE) else s
            rows.append([f"{name}, jobs/s", str(len(v)), tables.num(min(v)),
                         tables.num(statistics.median(v)), tables.num(max(v))])  # fmt: skip
    mine, theirs = _turns(run, "echomq"), _turns(run, NODE)
    pairs = [a / b for a, b in zip(mine, theirs, strict=False) if a and b]
    if pairs:
        rows.append(["echomq / BullMQ Node, turn by turn", str(len(pairs)),
                     tables.ratio(min(pairs)), tables.ratio(statistics.median(pairs)),
                     tables.ratio(max(pairs))])  # fmt: skip
    return tables.markdown(head, rows)


def _ceilings(run: _Run) -> str:
    rows = []
    for key, label in (
        ("ping_p16_c50", "PING, 50 clients, pipelined 16 deep (what the server can answer)"),
        ("ping_p1_c1", "PING, 1 client, one round trip at a time"),
    ):
        v = list(run.values("redis", key).values())
        if v:
            rows.append(
                (label, tables.num(statistics.median(v)), tables.span(v),
                 ", ".join(tables.num(x) for x in v))
            )  # fmt: skip
    loads = [s.get("load", "") for s in run.samples if s["system"] == "redis"]
    head = ("redis-benchmark, fresh redis-server per repetition", "calls/s", "range", "by rep")
    out = tables.markdown(head, rows)
    return out + f"\n\nLoad average at each repetition's start: {'; '.join(loads)}."


def _versions(meta: dict[str, Any]) -> str:
    found = [
        f"{k.removeprefix('versions.')}: " + ", ".join(f"{p} {v}" for p, v in meta[k].items())
        for k in sorted(meta)
        if k.startswith("versions.") and not k.startswith("versions.echomq@")
        and isinstance(meta[k], dict)
    ]  # fmt: skip
    return "; ".join(found)


def _notes(run: _Run) -> str:
    lines = [f"- {name}: {why}" for name, why in run.meta.get("no_bulk", {}).items()]
    skipped: dict[str, list[str]] = {}
    for s in run.samples:
        if f"drain{harness.BIG_DRAIN}_skipped" in s:
            skipped.setdefault(s["system"], []).append(s[f"drain{harness.BIG_DRAIN}_skipped"])
    lines += [
        f"- {name}: no {harness.BIG_DRAIN:,} drain (the smaller drain's prefill + drain "
        f"projected it past 2 minutes: {', '.join(why)})"
        for name, why in skipped.items()
    ]
    lines += [f"- failed: {n}" for n in run.notes]
    return "\n".join(lines)


def readme(doc: dict[str, Any], source: str) -> str:
    run = _Run(doc)
    parts = [
        tables.conditions(
            run.meta, reps=run.reps(), source=source, extra=f"Versions: {_versions(run.meta)}."
        ),
        "**Medians**\n\n" + _systems(run),
    ]
    if NODE in run.systems():
        parts.append("**Ratios to BullMQ Node** (higher is better for the rates, lower for the "
                     "latencies)\n\n" + _ratios(run) + "\n\n" + _per_rep(run))  # fmt: skip
    if _drains(run):
        parts.append("**Per job, over each drain's window** (CPU from /proc, utime + stime of "
                     "the worker's processes and of redis-server from the first completion "
                     "seen to the last; memory: used_memory when all are done minus before "
                     "the backlog, over N, default retention)\n\n" + _per_job(run))  # fmt: skip
    if any(s.get("enqueue_turns_per_s") for s in run.samples):
        parts.append("**Enqueue one at a time, every turn** (each on a fresh server, the "
                     "systems in turns)\n\n" + _enqueue(run))  # fmt: skip
    parts.append("**The Redis ceiling in each repetition**\n\n" + _ceilings(run))
    notes = _notes(run)
    if notes:
        parts.append("**Notes**\n\n" + notes)
    return "\n\n".join(parts)


if __name__ == "__main__":
    main()
