"""echomq alone, end to end, with one and with two worker processes.

    python -m benchmarks e2e [--reps 5] [--jobs 10000] [--publish]

Measured exactly as the peers are (echomq's adapter, ``adapters/peer_echomq.py``, through
:mod:`benchmarks.harness`), per repetition on fresh private redis-servers: the worker
process(es) started and warmed up, then ``--jobs`` no-op jobs enqueued by one producer
(100 in flight) while they run; the clock stops when all are done. With one worker process
the enqueue -> result round trip is measured too (one job at a time). The producer share
is the part of the run the producer spent enqueuing: near 1, the producer set the pace.
"""

from __future__ import annotations

import argparse
from typing import Any

import trio

from . import files, harness, machine, tables
from .stats import Results

__all__ = ["main", "readme", "run"]

LABELS = ("echomq e2e, 1 worker process", "echomq e2e, 2 worker processes")


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m benchmarks e2e",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    harness.add_arguments(p)
    files.add_arguments(p, reps=5)
    return p


async def run(args: argparse.Namespace) -> Results:
    res = Results()
    for rep in range(args.reps):
        for workers, label in enumerate(LABELS, start=1):
            modes = ("produce", "latency") if workers == 1 else ("produce",)
            try:
                figs = await harness.run_adapter(
                    "echomq", args, workers=workers, rep=rep, modes=modes, log=machine.log
                )
            except Exception as exc:
                res.notes.append(f"{label} rep {rep + 1}: {exc}")
                machine.log(f"{label}: FAILED {exc}")
                continue
            harness.record(res, label, figs, rep=rep)
    return res


def main(argv: list[str] | None = None) -> None:
    args = parser().parse_args(argv)
    meta = machine.describe("e2e", argv)
    res = trio.run(run, args)
    res.meta = machine.finish(meta)
    print(res.table("echomq end to end"), flush=True)
    files.save("e2e", res.to_json(), args)


def readme(doc: dict[str, Any], source: str) -> str:
    samples = doc["samples"]
    head = ("echomq alone", "no-op jobs/s", "range", "p50 ms", "p99 ms", "producer share", "n")
    rows = []
    for label in LABELS:
        mine = [s for s in samples if s["system"] == label and s.get("jobs_per_s")]
        if not mine:
            continue
        rates = [float(s["jobs_per_s"]) for s in mine]
        rows.append(
            (
                label.removeprefix("echomq e2e, "),
                tables.num(tables.median(rates)),
                tables.span(rates),
                tables.num(
                    tables.median(s["latency_p50_ms"] for s in mine if "latency_p50_ms" in s), 2
                ),
                tables.num(
                    tables.median(s["latency_p99_ms"] for s in mine if "latency_p99_ms" in s), 2
                ),
                tables.num(tables.median(s["enqueue_s"] / s["total_s"] for s in mine), 2),
                str(len(mine)),
            )
        )
    reps = len({s["rep"] for s in samples})
    return (
        tables.conditions(doc["meta"], reps=reps, source=source)
        + "\n\n"
        + tables.markdown(head, rows)
    )


if __name__ == "__main__":
    main()
