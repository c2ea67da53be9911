"""Flows at size and under faults, and what flows cost a queue that has none.

    python -m benchmarks flows [--parts chord,soak,hotpath] [--chord-members 10000] [--reps 3]
        [--base main] [--publish]

``chord``: a chord of ``--chord-members`` (10,000) ``leaf`` jobs and one ``callback``, on a
fresh private redis-server per repetition, worked by one worker process (``echomq worker
benchmarks.apps.flows_app:queue``, concurrency ``--concurrency``). The queue is paused while the
flow is added (``add``: the pages of 250, each one ``add_flow`` call), then resumed
(``run``: resume -> the callback's result). ``INFO memory``'s ``used_memory`` before the
add, after it, and after the run. Checked: the callback ran once, got every result, and
started after the last member finished (its ``TIME`` against the completions entries).
Beside it, the machine's ceiling in the same repetition (``redis-benchmark`` PING, as the
peers rotation measures it).

``soak``: a 3-level flow (a chord of ``--soak-mids`` chords of ``--soak-leaves`` leaves
each, ``total`` callbacks) worked by ``--soak-workers`` worker processes, one of them
SIGKILLed every ``--soak-kill-every`` seconds (and replaced at once) until the root's
result arrives; ``--soak-max-stalled`` (20) lets a job be caught in several kills before
recovery would dead-letter it as poison (the default, 1, is for real crashes). Counted
per node: executions (the tasks count themselves in a hash) and completions (the
completions stream's entries per job id): every node completed exactly once, and the
root's sum is right.

``hotpath``: end-to-end no-op jobs/s of one worker process (:mod:`benchmarks.noop`) on
this tree and on ``--base`` (a git revision, default main, its src/ exported), in turns in
every repetition on fresh servers, both modes of ``python -m benchmarks stream``
(``produce``: 100 in flight while the worker runs; ``drain``: a backlog first). The
producer is this process (this tree's enqueue, the same script on both sides).
"""

from __future__ import annotations

import argparse
import functools
import random
import statistics
from collections.abc import Callable
from pathlib import Path
from typing import Any

import trio

import echomq
from echomq import admin, jobs
from echomq._scripts.keyspace import Keyspace
from echomq.testing import RedisServer, kill_worker, open_worker_process

from . import files, machine, tables, turns
from .apps.flows_app import register, runs_key
from .files import LOGS
from .harness import ceilings
from .noop import PAYLOAD, completed, make_queue, produce, until_completed, used_memory, worker
from .noop import QUEUE as NOOP_QUEUE
from .stats import Results

__all__ = ["main", "readme", "run_flows"]

Log = Callable[[str], None]
ROOT = Path(__file__).resolve().parent.parent  # where the worker CLI imports the app
APP = "benchmarks.apps.flows_app:queue"
MiB = 2**20


def _env(queue: str, lease: float) -> dict[str, str | None]:
    return {"EMQ_BENCH_QUEUE": queue, "EMQ_BENCH_LEASE": str(lease), "PYTHONUNBUFFERED": "1"}


async def _entries(conn: echomq.Connection, queue: str) -> list[dict[str, str]]:
    """Every completions entry of ``queue`` (pages of 1,000)."""
    out: list[dict[str, str]] = []
    start = "-"
    stream = Keyspace(queue).completions
    while True:
        page = await conn.execute("XRANGE", stream, start, "+", "COUNT", 1000)
        for _entry_id, fields in page:
            row = {k.decode(): v.decode() for k, v in zip(fields[::2], fields[1::2], strict=True)}
            out.append(row)
        if len(page) < 1000:
            return out
        start = "(" + page[-1][0].decode()


# -- the 10,000-member chord ------------------------------------------------------------------


async def chord_once(url: str, args: argparse.Namespace, rep: int, log: Log) -> dict[str, Any]:
    name = f"chord-{rep}"
    q = echomq.Queue(name, url=url)
    t = register(q)
    members = args.chord_members
    canvas = echomq.chord([t["leaf"].s(i) for i in range(members)], t["callback"].s())
    async with q.open():
        conn = q.connection
        before = await used_memory(conn)
        await admin.ensure_schema(conn, name)  # (pause makes no queue)
        await admin.pause(conn, name)
        start = trio.current_time()
        handle = await canvas.apply()
        added = trio.current_time()
        after_add = await used_memory(conn)
        stats = await admin.stats(conn, name)
        async with open_worker_process(
            APP,
            url=url,
            concurrency=args.concurrency,
            cwd=ROOT,
            env=_env(name, 30.0),
            log_path=LOGS / f"flows-chord-{rep}.log",
        ):
            resumed = trio.current_time()
            await admin.resume(conn, name)
            value = await handle.result(timeout=900)
            done = trio.current_time()
        after_run = await used_memory(conn)
        entries = await _entries(conn, name)
        runs = await conn.execute("HGET", runs_key(name), "callback")
    leaves = [e for e in entries if e["id"] != handle.id]
    last_leaf_ms = max(int(e["finished_at"]) for e in leaves)
    figs = {
        "members": members,
        "add_s": added - start,
        "run_s": done - resumed,
        "add_to_result_s": (added - start) + (done - resumed),
        "jobs_added": stats.waiting + stats.pending,
        "waiting_after_add": stats.waiting,
        "used_before": before,
        "used_after_add": after_add,
        "used_after_run": after_run,
        "callback_runs": int(runs or 0),
        "callback_results": value["n"],
        "callback_sum_right": value["sum"] == members * (members - 1) // 2,
        "callback_after_last_member_ms": value["started_ms"] - last_leaf_ms,
        "completed_leaves": sum(e["state"] == "completed" for e in leaves),
    }
    log(f"chord rep {rep + 1}: {figs}")
    return figs


async def part_chord(args: argparse.Namespace, res: Results, log: Log) -> None:
    runs = []
    for rep in range(args.reps):
        await ceilings(rep, res, log=log)
        with RedisServer() as server:
            figs = await chord_once(server.url, args, rep, log)
        runs.append(figs)
        n = figs["members"] + 1
        ceiling = res.figures["ceiling: PING -P16 -c50"].values[-1]
        res.add("chord: add (pages of 250)", figs["add_s"], "s")
        res.add("chord: jobs added/s", n / figs["add_s"], "jobs/s", ceiling=ceiling, of="PING -P16")
        res.add("chord: run (resume -> callback result)", figs["run_s"], "s")
        res.add("chord: jobs run/s", n / figs["run_s"], "jobs/s", ceiling=ceiling, of="PING -P16")
        res.add("chord: add -> result", figs["add_to_result_s"], "s")
        res.add("chord: memory added", (figs["used_after_add"] - figs["used_before"]) / MiB, "MiB")
        res.add("chord: bytes per added job",
                (figs["used_after_add"] - figs["used_before"]) / n, "bytes")  # fmt: skip
        res.add("chord: memory after the run", (figs["used_after_run"] - figs["used_before"]) / MiB,
                "MiB")  # fmt: skip
        res.add("chord: callback runs", figs["callback_runs"], "runs")
        res.add("chord: results the callback got", figs["callback_results"], "results")
    res.meta["chord_runs"] = runs


# -- the kill -9 soak of a 3-level flow ------------------------------------------------------


async def soak_once(url: str, args: argparse.Namespace, log: Log) -> dict[str, Any]:
    name = "soak"
    lease = args.soak_lease
    q = echomq.Queue(name, url=url)
    t = register(q, lease)
    mids, width = args.soak_mids, args.soak_leaves
    canvas = echomq.chord(
        [
            echomq.chord(
                [t["leaf"].s(k * width + i, args.soak_leaf_seconds) for i in range(width)],
                t["total"].s(tag=f"mid:{k}"),
            )
            for k in range(mids)
        ],
        t["total"].s(tag="root"),
    )
    nodes = mids * width + mids + 1
    kills = 0
    rng = random.Random(14)
    async with q.open():
        conn = q.connection
        stops = [trio.Event() for _ in range(args.soak_workers)]
        finished = trio.Event()

        async def slot(i: int) -> None:
            nonlocal kills
            life = 0
            while not finished.is_set():
                life += 1
                async with open_worker_process(
                    APP,
                    url=url,
                    concurrency=args.soak_concurrency,
                    recovery_interval=0.1,
                    max_stalled=args.soak_max_stalled,
                    cwd=ROOT,
                    env=_env(name, lease),
                    log_path=LOGS / f"flows-soak-{i}-{life}.log",
                ) as worker:
                    await stops[i].wait()
                    stops[i] = trio.Event()
                    if finished.is_set():
                        return  # a graceful stop as the block ends
                    await kill_worker(worker)
                    kills += 1

        start = trio.current_time()
        async with trio.open_nursery() as nursery:
            for i in range(args.soak_workers):
                nursery.start_soon(slot, i)
            handle = await canvas.apply()

            async def killer() -> None:
                while True:
                    await trio.sleep(args.soak_kill_every)
                    stops[rng.randrange(args.soak_workers)].set()

            nursery.start_soon(killer)
            value = await handle.result(timeout=1800)
            took = trio.current_time() - start
            finished.set()
            nursery.cancel_scope.cancel()
        entries = await _entries(conn, name)
        runs_raw = await conn.execute("HGETALL", runs_key(name))
    runs = {k.decode(): int(v) for k, v in zip(runs_raw[::2], runs_raw[1::2], strict=True)}
    per_id: dict[str, int] = {}
    for e in entries:
        if e["state"] == "completed":
            per_id[e["id"]] = per_id.get(e["id"], 0) + 1
    leaves_total = sum(range(mids * width))
    figs = {
        "nodes": nodes,
        "workers": args.soak_workers,
        "kills": kills,
        "seconds": took,
        "root_right": value == leaves_total,
        "nodes_completed": len(per_id),
        "nodes_completed_twice": sum(1 for n in per_id.values() if n > 1),
        "other_outcomes": sum(1 for e in entries if e["state"] != "completed"),
        "nodes_executed": len(runs),
        "executions": sum(runs.values()),
        "nodes_run_twice_or_more": sum(1 for n in runs.values() if n > 1),
    }
    log(f"soak: {figs}")
    return figs


async def part_soak(args: argparse.Namespace, res: Results, log: Log) -> None:
    runs = []
    for _ in range(args.soak_reps):
        with RedisServer() as server:
            figs = await soak_once(server.url, args, log)
        runs.append(figs)
        res.add("soak: nodes", figs["nodes"], "jobs")
        res.add("soak: SIGKILLs", figs["kills"], "kills")
        res.add("soak: seconds to the root's result", figs["seconds"], "s")
        res.add("soak: nodes completed exactly once",
                figs["nodes_completed"] - figs["nodes_completed_twice"], "jobs")  # fmt: skip
        res.add("soak: nodes completed twice", figs["nodes_completed_twice"], "jobs")
        res.add("soak: executions (re-runs after a kill included)", figs["executions"], "runs")
        res.add("soak: root's result right", figs["root_right"], "bool")
    res.meta["soak_runs"] = runs


# -- the hot path: this commit against main -------------------------------------------------


async def hot_once(url: str, src: Path, mode: str, args: argparse.Namespace, tag: str) -> float:
    queue, noop = make_queue(url)
    async with queue.open():
        conn = queue.connection
        if mode == "produce":
            async with worker(url, args.concurrency, True, f"flows-hotpath-{tag}", src=src):
                await produce(noop, 200)
                await until_completed(conn, 200, within=60)
                start = trio.current_time()
                await produce(noop, args.jobs)
                end = await until_completed(conn, 200 + args.jobs)
            return float(args.jobs / (end - start))
        news = [noop.new_job((PAYLOAD,)) for _ in range(args.jobs)]
        for i in range(0, len(news), 250):
            await jobs.enqueue_many(conn, NOOP_QUEUE, news[i : i + 250])
        async with worker(url, args.concurrency, True, f"flows-hotpath-{tag}", src=src):
            with trio.fail_after(120):
                while await completed(conn) == 0:  # noqa: ASYNC110 - polling Redis
                    await trio.sleep(0.002)
            start = trio.current_time()
            first = await completed(conn)
            end = await until_completed(conn, args.jobs)
        return float((args.jobs - first) / (end - start))


async def part_hotpath(args: argparse.Namespace, res: Results, log: Log) -> None:
    sides = {"this tree": turns.this_src(), args.base: turns.src_of(args.base)}
    runs: list[dict[str, Any]] = []
    for rep in range(args.reps):
        for mode in ("produce", "drain"):
            for side in turns.rotate(list(sides), rep):
                with RedisServer() as server:
                    tag = f"{mode}-{rep}-{list(sides).index(side)}"
                    rate = await hot_once(server.url, sides[side], mode, args, tag)
                log(f"hotpath: {mode}, {side}, rep {rep + 1}: {rate:,.0f} jobs/s")
                res.add(f"{mode}: no-op jobs/s, {side}", rate, "jobs/s")
                runs.append({"mode": mode, "side": side, "rep": rep, "rate": rate})
    res.meta["hotpath_sides"] = list(sides)
    res.meta["hotpath_runs"] = runs
    this, base = list(sides)
    for mode in ("produce", "drain"):
        ratios = []
        for rep in range(args.reps):
            got = {r["side"]: r["rate"] for r in runs if r["mode"] == mode and r["rep"] == rep}
            ratios.append(got[this] / got[base])
        res.add(f"{mode}: {this} / {base} (per rep)", statistics.median(ratios), "ratio")
        res.meta[f"{mode}_ratios"] = ratios


async def run_flows(args: argparse.Namespace, *, log: Log) -> Results:
    res = Results()
    parts = args.parts.split(",")
    res.meta["flows"] = {
        "parts": parts,
        "chord_members": args.chord_members,
        "concurrency": args.concurrency,
        "jobs": args.jobs,
        "soak": {
            "mids": args.soak_mids,
            "leaves": args.soak_leaves,
            "leaf_seconds": args.soak_leaf_seconds,
            "workers": args.soak_workers,
            "concurrency": args.soak_concurrency,
            "kill_every_s": args.soak_kill_every,
            "lease_s": args.soak_lease,
            "max_stalled": args.soak_max_stalled,
        },
    }
    LOGS.mkdir(parents=True, exist_ok=True)
    if "chord" in parts:
        await part_chord(args, res, log)
    if "soak" in parts:
        await part_soak(args, res, log)
    if "hotpath" in parts:
        await part_hotpath(args, res, log)
    return res


# -- the command line and the README -----------------------------------------------------


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m benchmarks flows",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--parts", default="chord,soak,hotpath", help="which parts")
    p.add_argument("--chord-members", type=int, default=10_000, help="the chord's size")
    p.add_argument("--concurrency", type=int, default=100, help="the chord's and hot path's worker")
    p.add_argument("--jobs", type=int, default=10_000, help="hot path: jobs per run")
    p.add_argument("--base", default="main", help="hot path: the revision to compare with")
    p.add_argument("--soak-reps", type=int, default=1, help="soak runs")
    p.add_argument("--soak-mids", type=int, default=40, help="chords in the soak")
    p.add_argument("--soak-leaves", type=int, default=100, help="leaves per chord")
    p.add_argument("--soak-leaf-seconds", type=float, default=0.1, help="a leaf's run")
    p.add_argument("--soak-workers", type=int, default=3, help="worker processes")
    p.add_argument("--soak-concurrency", type=int, default=16, help="per worker")
    p.add_argument("--soak-kill-every", type=float, default=1.0, help="seconds between kills")
    p.add_argument("--soak-max-stalled", type=int, default=20, help="the workers' option")
    p.add_argument("--soak-lease", type=float, default=1.0, help="the tasks' lease (s)")
    files.add_arguments(p, reps=3)
    return p


def main(argv: list[str] | None = None) -> None:
    args = parser().parse_args(argv)
    meta = machine.describe("flows", argv)
    res = trio.run(functools.partial(run_flows, args, log=machine.log))
    res.meta = machine.finish({**meta, **res.meta})
    print(res.table("flows"), flush=True)
    files.save("flows", res.to_json(), args)


def _per_rep(values: list[float], fmt: str) -> str:
    cells = [fmt.format(v) for v in values]
    return " | ".join(cells) + f" | **{fmt.format(statistics.median(values))}**"


def _hotpath(meta: dict[str, Any]) -> list[str]:
    runs = meta.get("hotpath_runs") or []
    if not runs:
        return []
    sides = meta.get("hotpath_sides") or list(dict.fromkeys(r["side"] for r in runs))
    this, base = sides
    reps = sorted({r["rep"] for r in runs})
    lines = [
        f"**The hot path** (a queue without flows): no-op jobs/s of one worker process "
        f"(concurrency {meta['flows']['concurrency']}), {meta['flows']['jobs']:,} jobs per run, "
        "this tree and the base (`--base`) in turns on fresh servers:",
        "",
        "| mode | " + " | ".join(f"rep {r + 1}" for r in reps) + " | median |",
        "|---|" + "---:|" * (len(reps) + 1),
    ]
    for mode in ("produce", "drain"):
        got = {(r["side"], r["rep"]): r["rate"] for r in runs if r["mode"] == mode}
        cells = [f"{got[(this, r)]:,.0f} / {got[(base, r)]:,.0f}" for r in reps]
        ratios = [got[(this, r)] / got[(base, r)] for r in reps]
        lines.append(f"| {mode}: jobs/s this / base | " + " | ".join(cells) + " | |")
        lines.append(f"| {mode}: ratio | " + _per_rep(ratios, "{:.2f}") + " |")
    return lines


def readme(doc: dict[str, Any], source: str) -> str:
    meta, fig = doc["meta"], doc["figures"]
    chord = meta.get("chord_runs") or []
    lines = [tables.conditions(meta, reps=len(chord) or None, source=source), ""]
    if chord:
        lines += [
            f"**A chord of {chord[0]['members']:,} members and one callback**, one worker "
            f"process (concurrency {meta['flows']['concurrency']}):",
            "",
            "| figure | " + " | ".join(f"rep {i + 1}" for i in range(len(chord))) + " | median |",
            "|---|" + "---:|" * (len(chord) + 1),
            "| add: the pages of 250 (s) | "
            + _per_rep([r["add_s"] for r in chord], "{:.2f}") + " |",
            "| run: resume -> the callback's result (s) | "
            + _per_rep([r["run_s"] for r in chord], "{:.2f}") + " |",
            "| add -> result (s) | "
            + _per_rep([r["add_to_result_s"] for r in chord], "{:.2f}") + " |",
            "| jobs added/s | " + _per_rep(fig["chord: jobs added/s"]["values"], "{:,.0f}") + " |",
            "| jobs run/s | " + _per_rep(fig["chord: jobs run/s"]["values"], "{:,.0f}") + " |",
            "| Redis ceiling, PING -P16 -c50 (calls/s) | "
            + _per_rep(fig["ceiling: PING -P16 -c50"]["values"], "{:,.0f}") + " |",
            "| Redis ceiling, PING -P1 -c1 (calls/s) | "
            + _per_rep(fig["ceiling: PING -P1 -c1 (one round trip at a time)"]["values"], "{:,.0f}")
            + " |",
            "| used_memory added by the flow (MiB) | "
            + _per_rep([(r["used_after_add"] - r["used_before"]) / MiB for r in chord], "{:.2f}")
            + " |",
            "| per job added (bytes) | "
            + _per_rep(fig["chord: bytes per added job"]["values"], "{:,.0f}") + " |",
            "| used_memory after the run, above the empty server (MiB) | "
            + _per_rep([(r["used_after_run"] - r["used_before"]) / MiB for r in chord], "{:.2f}")
            + " |",
            "| callback runs | " + _per_rep([r["callback_runs"] for r in chord], "{:.0f}") + " |",
            "| results the callback got | "
            + _per_rep([r["callback_results"] for r in chord], "{:,.0f}") + " |",
            "| their sum right | "
            + " | ".join("yes" if r["callback_sum_right"] else "NO" for r in chord) + " | |",
            "| the callback started after the last member finished, by (ms) | "
            + _per_rep([r["callback_after_last_member_ms"] for r in chord], "{:.0f}") + " |",
            "",
        ]  # fmt: skip
    for soak in meta.get("soak_runs") or []:
        s = meta["flows"]["soak"]
        lines += [
            f"**kill -9 under a 3-level flow**: a chord of {s['mids']} chords of {s['leaves']} "
            f"leaves ({s['leaf_seconds']} s each), {soak['workers']} worker processes "
            f"(concurrency {s['concurrency']}, task lease {s['lease_s']} s, max_stalled "
            f"{s['max_stalled']}), one SIGKILLed every {s['kill_every_s']} s and replaced:",
            "",
            "| nodes | SIGKILLs | seconds | completed exactly once | completed twice | "
            "executions (nodes run more than once) | other outcomes | root's result right |",
            "|---:|---:|---:|---:|---:|---:|---:|---|",
            f"| {soak['nodes']:,} | {soak['kills']} | {soak['seconds']:.1f} | "
            f"{soak['nodes_completed'] - soak['nodes_completed_twice']:,} | "
            f"{soak['nodes_completed_twice']} | {soak['executions']:,} "
            f"({soak['nodes_run_twice_or_more']}) | {soak['other_outcomes']} | "
            f"{'yes' if soak['root_right'] else 'NO'} |",
            "",
        ]
    lines += _hotpath(meta)
    return "\n".join(lines).rstrip()


if __name__ == "__main__":
    main()
