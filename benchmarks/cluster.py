"""The same queues and workers on one Redis node and on a 3-master Redis Cluster.

    python -m benchmarks cluster [--queues 3] [--jobs 20000] [--seconds 8] [--reps 3] [--publish]

Three layouts, each started fresh per repetition (private servers, nothing else on them):
``one node`` (a plain redis-server, ``redis://``), ``cluster, 1 master`` (the cluster wire,
every slot on one master: what the wire costs) and ``cluster, 3 masters``. The same
``--queues`` queues (default 3) in each, named so that on 3 masters each master owns
the same number of them; one worker process per queue (``echomq.Worker``, concurrency
``--concurrency``, a no-op task). Each queue holds a backlog of ``--jobs`` jobs
(enqueued before the workers start); once every queue completed a warm-up of 200, the clock
runs for ``--seconds`` (or until a queue nears its end): jobs/s is the jobs
completed in that window over its length, summed over the queues (the scripts' per-queue
``metrics:completed`` counters). In the same window: each Redis node's CPU (``INFO cpu``,
user + sys, as a share of one core) and the worker processes' CPU (``/proc``), so the
table shows what saturates: on a 2-core machine, Python workers, not Redis.

The ceiling, printed beside (same layout, same repetition, before the workers run):
``redis-benchmark`` ``PING -P16 -c50`` against every master at once, summed: what this
machine's Redis servers answer together when nothing else runs. The worker processes run
``python -m benchmarks.cluster worker URL QUEUE CONCURRENCY``.
"""

from __future__ import annotations

import argparse
import functools
import os
import re
import statistics
import sys
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import AsyncExitStack, asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any

import trio

import echomq
from echomq import jobs
from echomq._scripts.keyspace import Keyspace
from echomq._wire.hashslots import SLOTS, key_slot
from echomq.testing import RedisCluster, RedisServer

from . import files, machine, tables
from .ceiling import redis_benchmark
from .files import LOGS
from .stats import Results

__all__ = ["LAYOUTS", "main", "queue_names", "readme", "run_cluster"]

Log = Callable[[str], None]
PAYLOAD = "x" * 100
ROOT = Path(__file__).resolve().parent.parent  # where ``-m benchmarks.cluster`` imports
LAYOUTS = ("one node", "cluster, 1 master", "cluster, 3 masters")
WARM_UP = 200
TICK = os.sysconf("SC_CLK_TCK")


def queue_names(count: int, masters: int = 3) -> list[str]:
    """``count`` queue names spread evenly over ``masters`` masters of a cluster whose slots
    are split in equal ranges (echomq.testing.RedisCluster's layout)."""
    share = SLOTS // masters
    per: list[list[str]] = [[] for _ in range(masters)]
    i = 0
    while sum(len(p) for p in per) < count:
        name = f"bench{i}"
        i += 1
        owner = min(key_slot(Keyspace(name).pending) // share, masters - 1)
        if len(per[owner]) < -(-count // masters):
            per[owner].append(name)
    names = [n for group in zip(*per, strict=False) for n in group]
    rest = [n for group in per for n in group if n not in names]
    return (names + rest)[:count]


# -- the worker process ---------------------------------------------------------------------


def worker_main(argv: list[str]) -> None:
    """``python -m benchmarks.cluster worker URL QUEUE CONCURRENCY``."""
    url, name, concurrency = argv[0], argv[1], int(argv[2])
    queue = echomq.Queue(name, url=url)

    @queue.task(name="noop")
    async def noop(payload: str) -> str:
        return "ok"

    trio.run(echomq.Worker(queue, concurrency=concurrency).serve)


@asynccontextmanager
async def workers(url: str, names: list[str], concurrency: int) -> AsyncIterator[list[int]]:
    """One worker process per queue; answers their pids."""
    LOGS.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    procs: list[trio.Process] = []
    try:
        with open(LOGS / "cluster-workers.log", "ab") as out:  # noqa: ASYNC230 - before the children
            for name in names:
                command = [sys.executable, "-m", "benchmarks.cluster", "worker", url, name,
                           str(concurrency)]  # fmt: skip
                procs.append(
                    await trio.lowlevel.open_process(
                        command, stdout=out, stderr=out, cwd=ROOT, env=env
                    )
                )
        yield [p.pid for p in procs]
    finally:
        for p in procs:
            p.terminate()
        with trio.move_on_after(10):
            for p in procs:
                await p.wait()
        for p in procs:
            if p.returncode is None:
                p.kill()
                await p.wait()


def process_cpu(pid: int) -> float:
    """CPU seconds (user + sys) a process has used, from /proc."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


# -- the layouts -------------------------------------------------------------------------------


@contextmanager
def layout(name: str) -> Iterator[tuple[str, list[int]]]:
    """Start ``name``'s servers: (the URL, the masters' ports)."""
    if name == "one node":
        with RedisServer() as server:
            yield server.url, [server.port]
        return
    masters = 1 if name == "cluster, 1 master" else 3
    with RedisCluster(masters=masters) as cluster:
        yield cluster.url, [m.port for m in cluster.masters()]


async def redis_cpu(nodes: dict[int, echomq.Connection]) -> dict[int, float]:
    """CPU seconds (user + sys, every thread) each node has used."""
    out = {}
    for port, conn in nodes.items():
        info = (await conn.execute("INFO", "cpu")).decode()
        found = dict(re.findall(r"^(used_cpu_(?:user|sys)):([\d.]+)", info, re.MULTILINE))
        out[port] = float(found["used_cpu_user"]) + float(found["used_cpu_sys"])
    return out


async def ceiling(ports: list[int]) -> float:
    """redis-benchmark PING -P16 -c50 on every master at once, summed."""
    rates: list[float] = []

    async def one(port: int) -> None:
        rates.append(await redis_benchmark(port, ["PING"], 1_000_000 // len(ports)))

    async with trio.open_nursery() as nursery:
        for port in ports:
            nursery.start_soon(one, port)
    return sum(rates)


async def completed(conn: echomq.Connection, names: list[str]) -> list[int]:
    """Each queue's completed count (the scripts' counter; one slot each: no pipeline)."""
    return [
        int(await conn.execute("HGET", Keyspace(n).metrics_completed, "count") or 0) for n in names
    ]


async def run_layout(
    name: str, names: list[str], args: argparse.Namespace, log: Log
) -> dict[str, Any]:
    """One repetition of one layout: its ceiling, then the workers' window."""
    with layout(name) as (url, ports):
        ceil = await ceiling(ports)
        async with echomq.connect(url) as conn:
            owners: dict[str, int] = {}
            for queue_name in names:
                q = echomq.Queue(queue_name, url=url)

                @q.task(name="noop")
                async def noop(payload: str) -> str:
                    return "ok"

                news = [noop.new_job((PAYLOAD,)) for _ in range(args.cluster_jobs)]
                for i in range(0, len(news), 250):
                    await jobs.enqueue_many(conn, queue_name, news[i : i + 250])
            async with AsyncExitStack() as stack:
                nodes = {
                    port: await stack.enter_async_context(
                        echomq.connect(f"redis://127.0.0.1:{port}/0")
                    )
                    for port in ports
                }  # plain connections to each node, for INFO
                pids = await stack.enter_async_context(workers(url, names, args.concurrency))
                for queue_name in names:
                    owners[queue_name] = await _owner(conn, ports, nodes, queue_name)
                with trio.fail_after(120):
                    while min(await completed(conn, names)) < WARM_UP:  # noqa: ASYNC110
                        await trio.sleep(0.05)
                start, done0 = trio.current_time(), await completed(conn, names)
                cpu0, wcpu0 = await redis_cpu(nodes), [process_cpu(p) for p in pids]
                end, done1 = start, done0
                limit = args.cluster_jobs * 0.95
                while end - start < args.cluster_seconds:
                    await trio.sleep(0.1)
                    end, done1 = trio.current_time(), await completed(conn, names)
                    if max(done1) >= limit:
                        break
                cpu1, wcpu1 = await redis_cpu(nodes), [process_cpu(p) for p in pids]
    seconds = end - start
    per_queue = [(b - a) / seconds for a, b in zip(done0, done1, strict=True)]
    return {
        "layout": name,
        "ceiling": ceil,
        "seconds": seconds,
        "rate": sum(per_queue),
        "per_queue": dict(zip(names, per_queue, strict=True)),
        "owners": owners,
        "redis_cpu": {str(p): (cpu1[p] - cpu0[p]) / seconds for p in ports},
        "workers_cpu": [(b - a) / seconds for a, b in zip(wcpu0, wcpu1, strict=True)],
        "load": os.getloadavg()[0],
    }


async def _owner(
    conn: echomq.Connection, ports: list[int], nodes: dict[int, echomq.Connection], name: str
) -> int:
    """The port of the master that holds queue ``name``."""
    if len(ports) == 1:
        return ports[0]
    slot = key_slot(Keyspace(name).pending)
    for port in ports:
        if await nodes[port].execute("CLUSTER", "COUNTKEYSINSLOT", slot):
            return port
    return 0


async def run_cluster(args: argparse.Namespace, *, log: Log) -> Results:
    res = Results()
    names = queue_names(args.cluster_queues)
    res.meta["cluster"] = {
        "queues": names,
        "jobs_per_queue": args.cluster_jobs,
        "window_s": args.cluster_seconds,
        "concurrency": args.concurrency,
        "worker_processes": len(names),
    }
    runs: list[dict[str, Any]] = []
    for rep in range(args.reps):
        order = LAYOUTS if rep % 2 == 0 else tuple(reversed(LAYOUTS))
        for name in order:
            figs = await run_layout(name, names, args, log)
            figs["rep"] = rep
            runs.append(figs)
            cpu = ", ".join(f"{c:.0%}" for c in figs["redis_cpu"].values())
            log(
                f"cluster: {name}, rep {rep + 1}: {figs['rate']:,.0f} jobs/s "
                f"(ceiling {figs['ceiling']:,.0f}/s), redis CPU {cpu}, "
                f"workers CPU {sum(figs['workers_cpu']):.0%}, load {figs['load']:.2f}"
            )
            res.add(f"{name}: no-op jobs/s", figs["rate"], "jobs/s",
                    ceiling=figs["ceiling"], of="PING -P16 on every master")  # fmt: skip
            res.add(f"{name}: ceiling (PING -P16 -c50, every master at once)", figs["ceiling"],
                    "calls/s")  # fmt: skip
            for i, c in enumerate(sorted(figs["redis_cpu"].values(), reverse=True)):
                res.add(f"{name}: Redis CPU, node {i + 1}", 100 * c, "% core")
            res.add(f"{name}: worker processes' CPU", 100 * sum(figs["workers_cpu"]), "% core")
    res.samples += runs
    return res


# -- the README table -----------------------------------------------------------------------


def _node_cpu(run: dict[str, Any], i: int) -> float:
    """The ``i``-th busiest node's Redis CPU in one run, in % of a core."""
    return 100 * float(sorted(run["redis_cpu"].values(), reverse=True)[i])


def readme(data: dict[str, Any], source: str) -> str:
    """The README table from one saved results file."""
    meta, runs = data["meta"], data["samples"]
    setup = meta["cluster"]

    def med(layout_name: str, pick: Callable[[dict[str, Any]], float]) -> float:
        return statistics.median(pick(r) for r in runs if r["layout"] == layout_name)

    setup_line = (
        f"{len(setup['queues'])} queues, one worker process each (concurrency "
        f"{setup['concurrency']}, no-op task), a backlog of {setup['jobs_per_queue']:,} jobs per "
        f"queue, a window of {setup['window_s']:g} s; medians."
    )
    lines = [
        tables.conditions(
            meta, reps=len({r["rep"] for r in runs}), source=source, extra=setup_line
        ),
        "",
        "| layout | jobs/s | Redis ceiling (PING -P16, every master) | Redis CPU per node "
        "(% of a core) | Redis CPU per job, all nodes (µs) | workers' CPU (% of a core) |",
        "|---|---:|---:|---|---:|---:|",
    ]
    for name in LAYOUTS:
        if not any(r["layout"] == name for r in runs):
            continue
        nodes = max(len(r["redis_cpu"]) for r in runs if r["layout"] == name)
        per_node = [med(name, functools.partial(_node_cpu, i=i)) for i in range(nodes)]
        lines.append(
            f"| {name} | {med(name, lambda r: r['rate']):,.0f} "
            f"| {med(name, lambda r: r['ceiling']):,.0f} "
            f"| {' / '.join(f'{c:.0f}' for c in per_node)} "
            f"| {med(name, lambda r: 1e6 * sum(r['redis_cpu'].values()) / r['rate']):.0f} "
            f"| {med(name, lambda r: 100 * sum(r['workers_cpu'])):.0f} |"
        )
    return "\n".join(lines)


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m benchmarks cluster",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--queues", dest="cluster_queues", type=int, default=3)
    p.add_argument("--jobs", dest="cluster_jobs", type=int, default=20_000, help="per queue")
    p.add_argument("--seconds", dest="cluster_seconds", type=float, default=8.0, help="window")
    p.add_argument("--concurrency", type=int, default=100, help="per worker process")
    files.add_arguments(p, reps=3)
    return p


def main(argv: list[str] | None = None) -> None:
    args = parser().parse_args(argv)
    meta = machine.describe("cluster", argv)
    res = trio.run(functools.partial(run_cluster, args, log=machine.log))
    res.meta = machine.finish({**meta, **res.meta})
    print(res.table("one node vs a Redis Cluster"), flush=True)
    files.save("cluster", res.to_json(), args)


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "worker":
        worker_main(sys.argv[2:])
    else:
        main()
