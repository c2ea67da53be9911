"""One Worker serving three queues by weights (the shares), and an empty queue above one.

The shares served against the weights, and what an empty queue above a busy one costs.

    python -m benchmarks weights [--weights 5,3,1] [--jobs 3000] [--concurrency 9,18,64]
        [--reps 3] [--empty-jobs 20000] [--empty-reps 5] [--publish]

Each run is in-process, on one private redis-server (``echomq.testing.RedisServer``):
- shares: three queues, each holding ``--jobs`` no-op jobs (so every queue still has work
  when the count stops), then one ``Worker([a, b, c], weights=..., concurrency=N)``; its
  task records each job's queue as it starts (one trio thread: the list is the start
  order). The shares are those of the first ``--jobs`` starts, beside ``w_i / sum(w)``;
  each concurrency in every repetition, a fresh set of queues each time.
- empty above: ``--empty-jobs`` no-op jobs on one queue, drained in turns (``--empty-reps``
  repetitions, after the shares') by
  ``Worker([busy])`` and by ``Worker([empty, busy])`` (strict order, the empty queue
  first), concurrency 16; the drain's seconds (the worker started to the last job done),
  this process's CPU over them (the worker's: nothing else runs) and the claim calls the
  worker made to each queue (``Worker.statistics``).
"""

from __future__ import annotations

import argparse
import collections
import statistics
import time
from collections.abc import Sequence
from contextlib import AsyncExitStack
from typing import Any

import trio

import echomq
from echomq import admin
from echomq.testing import RedisServer

from . import files, machine, tables

__all__ = ["main", "readme", "run"]

EMPTY_CONCURRENCY = 16
NAMES = "abcdefghij"


def _ints(text: str) -> list[int]:
    return [int(x) for x in text.split(",") if x.strip()]


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m benchmarks weights",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--weights", type=_ints, default=[5, 3, 1], help="one per queue (5,3,1)")
    p.add_argument("--jobs", type=int, default=3000, help="starts counted (and jobs per queue)")
    p.add_argument(
        "--concurrency", type=_ints, default=[9, 18, 64], help="the worker's slots (9,18,64)"
    )
    p.add_argument("--empty-jobs", type=int, default=20_000, help="the empty-above drain's jobs")
    p.add_argument("--empty-reps", type=int, default=5, help="the empty-above repetitions (5)")
    files.add_arguments(p, reps=3)
    return p


def _work_task(q: echomq.Queue, started: list[str], target: int, enough: trio.Event) -> Any:
    @q.task(name="work")
    async def work(job: echomq.Job) -> None:
        started.append(job.queue)
        if len(started) >= target:
            enough.set()

    return work


async def shares(
    url: str, tag: str, weights: Sequence[int], jobs: int, concurrency: int
) -> dict[str, Any]:
    """The first ``jobs`` starts of a weighted Worker over ``len(weights)`` queues, each
    holding ``jobs`` jobs."""
    queues = [echomq.Queue(f"{tag}-{NAMES[i]}", url=url) for i in range(len(weights))]
    started: list[str] = []
    enough = trio.Event()
    tasks = [_work_task(q, started, jobs, enough) for q in queues]
    async with AsyncExitStack() as stack:
        for q in queues:
            await stack.enter_async_context(q.open())
            await admin.ensure_schema(q.connection, q.name)
        for task in tasks:
            await task.starmap([()] * jobs)
        worker = echomq.Worker(queues, concurrency=concurrency, weights=tuple(weights))
        async with trio.open_nursery() as nursery:
            await nursery.start(worker.serve)
            with trio.fail_after(300):
                await enough.wait()
            worker.shutdown()
    counted = collections.Counter(started[:jobs])
    served = [counted[q.name] for q in queues]
    # every queue had work throughout: what it served, plus what the worker can hold
    # (its slots and its prefetch, at most half as many again), is below what it held
    if len(weights) > 1 and max(served) + 2 * concurrency >= jobs:
        raise RuntimeError(f"{tag}: a queue may have run out of work while counted: {served}")
    return {"concurrency": concurrency, "served": served, "counted": jobs}


async def empty_above(url: str, tag: str, mode: str, jobs: int) -> dict[str, Any]:
    """``jobs`` jobs on a busy queue drained by ``Worker([busy])`` (``alone``) or by
    ``Worker([empty, busy])`` (``empty above``): the seconds and the claim calls."""
    busy = echomq.Queue(f"{tag}-busy", url=url)
    empty = echomq.Queue(f"{tag}-empty", url=url)
    done = [0]
    finished = trio.Event()

    @busy.task(name="work")
    async def work() -> None:
        done[0] += 1
        if done[0] >= jobs:
            finished.set()

    @empty.task(name="work")
    async def never() -> None:
        raise RuntimeError("the empty queue has no job")

    queues = [busy] if mode == "alone" else [empty, busy]
    async with AsyncExitStack() as stack:
        for q in (empty, busy):
            await stack.enter_async_context(q.open())
            await admin.ensure_schema(q.connection, q.name)
        await work.starmap([()] * jobs)
        worker = echomq.Worker(queues, concurrency=EMPTY_CONCURRENCY)
        async with trio.open_nursery() as nursery:
            await nursery.start(worker.serve)
            t0, cpu0 = time.perf_counter(), time.process_time()
            with trio.fail_after(300):
                await finished.wait()
            seconds = time.perf_counter() - t0
            cpu = time.process_time() - cpu0
            stats = worker.statistics()
            worker.shutdown()
    claims = list(stats.queue_claims) if mode != "alone" else [stats.claims]
    return {
        "mode": mode,
        "seconds": seconds,
        "jobs_per_s": jobs / seconds,
        "cpu_us_per_job": cpu / jobs * 1e6,
        "claims": claims,
    }


async def run(args: argparse.Namespace) -> dict[str, Any]:
    weights: list[int] = args.weights
    out: dict[str, Any] = {
        "weights": weights,
        "jobs": args.jobs,
        "concurrency": args.concurrency,
        "shares": [],
        "empty_jobs": args.empty_jobs,
        "empty_reps": args.empty_reps,
        "empty_concurrency": EMPTY_CONCURRENCY,
        "empty": [],
    }
    with RedisServer() as server:
        for rep in range(args.reps):
            for concurrency in args.concurrency:
                got = await shares(
                    server.url, f"w{concurrency}-{rep}", weights, args.jobs, concurrency
                )
                got["rep"] = rep
                out["shares"].append(got)
                machine.log(f"rep {rep + 1} concurrency {concurrency}: served {got['served']}")
        for rep in range(args.empty_reps):
            modes = ("alone", "empty above") if rep % 2 == 0 else ("empty above", "alone")
            for mode in modes:
                one = await empty_above(
                    server.url, f"e{rep}-{mode.replace(' ', '')}", mode, args.empty_jobs
                )
                one["rep"] = rep
                out["empty"].append(one)
                machine.log(
                    f"rep {rep + 1} {mode}: {one['jobs_per_s']:,.0f} jobs/s, claims {one['claims']}"
                )
    return out


def main(argv: list[str] | None = None) -> None:
    args = parser().parse_args(argv)
    meta = machine.describe("weights", argv)
    doc = trio.run(run, args)
    doc["meta"] = machine.finish(meta)
    files.save("weights", doc, args)
    print(readme(doc, ""), flush=True)


def readme(doc: dict[str, Any], source: str) -> str:
    """The README's tables: each queue's share per concurrency and repetition beside its
    weight's; then the empty queue above, its claims and the drain's rate."""
    weights: list[int] = doc["weights"]
    total = sum(weights)
    reps = sorted({s["rep"] for s in doc["shares"]})
    names = [NAMES[i] for i in range(len(weights))]
    extra = (
        f"One Worker serving {len(weights)} queues by weights "
        f"{','.join(map(str, weights))}, each queue holding {doc['jobs']:,} jobs; the shares "
        f"of the first {doc['jobs']:,} starts."
    )
    head = ["concurrency", "queue (weight)", "expected", *(f"rep {r + 1}" for r in reps)]
    head += ["median", "median / expected - 1"]
    rows = []
    for concurrency in doc["concurrency"]:
        runs = {s["rep"]: s for s in doc["shares"] if s["concurrency"] == concurrency}
        for i, name in enumerate(names):
            expected = weights[i] / total
            got = [runs[r]["served"][i] / runs[r]["counted"] for r in reps]
            mid = statistics.median(got)
            rows.append(
                [
                    str(concurrency),
                    f"{name} ({weights[i]})",
                    f"{expected:.1%}",
                    *(
                        f"{g:.1%} ({runs[r]['served'][i]:,})"
                        for g, r in zip(got, reps, strict=True)
                    ),
                    f"**{mid:.1%}**",
                    f"{mid / expected - 1:+.1%}",
                ]
            )
    lines = [
        tables.conditions(tables.meta_of(doc), reps=len(reps), source=source, extra=extra),
        "",
        tables.markdown(head, rows),
    ]
    empty = doc.get("empty")
    if empty:
        by = {(e["mode"], e["rep"]): e for e in empty}
        lines += [
            "",
            f"{doc['empty_jobs']:,} jobs on one queue, concurrency {doc['empty_concurrency']}, "
            "drained in turns by a Worker serving it alone and by one serving an empty queue "
            "above it (strict order); the worker's CPU is its process's over the drain:",
            "",
        ]
        turns = sorted({e["rep"] for e in empty})
        head = ["", *(f"rep {r + 1}" for r in turns), "median"]
        alone = [by["alone", r] for r in turns]
        above = [by["empty above", r] for r in turns]
        ratios = [b["jobs_per_s"] / a["jobs_per_s"] for a, b in zip(alone, above, strict=True)]
        cpu_ratios = [
            b["cpu_us_per_job"] / a["cpu_us_per_job"] for a, b in zip(alone, above, strict=True)
        ]
        to_empty = [b["claims"][0] for b in above]
        to_busy = [b["claims"][1] for b in above]
        body = [
            ["alone: drain jobs/s", *(tables.num(a["jobs_per_s"]) for a in alone),
             tables.num(statistics.median(a["jobs_per_s"] for a in alone))],
            ["empty above: drain jobs/s", *(tables.num(b["jobs_per_s"]) for b in above),
             tables.num(statistics.median(b["jobs_per_s"] for b in above))],
            ["empty above / alone, jobs/s", *(f"{x:.2f}" for x in ratios),
             f"**{statistics.median(ratios):.2f}**"],
            ["alone: worker CPU µs per job", *(f"{a['cpu_us_per_job']:.1f}" for a in alone),
             f"{statistics.median(a['cpu_us_per_job'] for a in alone):.1f}"],
            ["empty above: worker CPU µs per job",
             *(f"{b['cpu_us_per_job']:.1f}" for b in above),
             f"{statistics.median(b['cpu_us_per_job'] for b in above):.1f}"],
            ["empty above / alone, CPU per job", *(f"{x:.2f}" for x in cpu_ratios),
             f"**{statistics.median(cpu_ratios):.2f}**"],
            ["alone: claim calls", *(str(a["claims"][0]) for a in alone), ""],
            ["empty above: claim calls to the empty queue", *map(str, to_empty),
             f"**{statistics.median(to_empty):g}**"],
            ["empty above: claim calls to the busy queue", *map(str, to_busy),
             f"{statistics.median(to_busy):g}"],
            ["empty above: drain seconds", *(f"{b['seconds']:.2f}" for b in above), ""],
        ]  # fmt: skip
        lines.append(tables.markdown(head, body))
    return "\n".join(lines)


if __name__ == "__main__":
    main()
