"""``python -m benchmarks``: echomq's throughput and latency beside the Redis ceiling and the peers.

Subcommands (each starts its own private redis-server; nothing touches a system Redis):
  verbs     claim / extend / enqueue through the verbs at 1/16/64/256 callers on one
            connection, each beside redis-benchmark's ceiling for the same script (-P 16)
  first     issue 2's figure script: ``verbs`` with 1 and 64 callers
  e2e       echomq end to end: no-op jobs/s with 1 and 2 worker processes; enqueue -> result
            latency p50/p99, one job at a time
  peers     every mode (drain a backlog, concurrent producer, enqueue one at a time, bulk,
            latency) for echomq, BullMQ on Node and arq, saq, rq, celery, taskiq, streaq,
            bullmq (Python), dramatiq, huey (each in benchmarks/.peers/<name>, made from PyPI or
            npm at run time), with redis-benchmark's ceiling in every repetition
  archive   the durable archive (issue 11): entries/s into SQLite and PostgreSQL, paced at
            echomq's end-to-end rate and draining a backlog; the lag over the run
  results   the scripts' half of issue 11: no-op jobs/s with and without the completions
            stream, the archive on the real worker's stream, Redis memory after 1M jobs
  cluster   issue 16: the same queues (one worker process each) on one node, on a 1-master and
            on a 3-master Redis Cluster: jobs/s, Redis CPU per node, the workers' CPU, beside
            redis-benchmark's ceiling on every master; --render [--from FILE] [--write]: the
            README table from a saved (published) results file
  all       verbs, e2e and peers, in that order
  report    the README tables from one saved results file (--from FILE); --write puts them
            into benchmarks/README.md and README.md between their report markers
  flows     issue 14: a 10,000-member chord (time, memory, the callback once) beside the
            ceiling, a 3-level flow under kill -9 of its workers, and no-op jobs/s of this
            commit against main (the cost of flows to a queue without them); --render
            [--from FILE [HOTPATH FILES]] [--write]: its README section
  bounds    every Lua script's server time on a queue of 1M jobs, at its caps (issue 9);
            saved to benchmarks/bounds.json and rendered into README.md (--render: no run)
  lanes     group lanes and rate limits (issue 12): fairness, the claim with 10 / 1,000 /
            10,000 groups beside ungrouped, a 100/s rate limit over 4 worker processes;
            saved to benchmarks/results/lanes-<date>.json or --json (--lanes-parts
            fairness,claim,rate; published: results/published/lanes-20261201b.json)
  ecosystem issue 17: the trio / asyncio / blocking producers' enqueue/s in one run; end
            to end no-op jobs/s before this work, with its hooks, with opentelemetry-api,
            and with /metrics scraped (saved to benchmarks/results/)
Results print as tables (median over --reps, and each figure's ratio to its ceiling) and are
saved as JSON under benchmarks/results/ (ignored by git).
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import platform
import subprocess
import sys
from pathlib import Path

import trio

import echomq
from echomq.testing import RedisServer

from .stats import Results

RESULTS_DIR = Path(__file__).resolve().parent / "results"


def log(message: str) -> None:
    print(f"[{dt.datetime.now():%H:%M:%S}] {message}", file=sys.stderr, flush=True)


def machine() -> dict[str, str]:
    redis = subprocess.run(["redis-server", "--version"], capture_output=True, text=True).stdout
    return {
        "date": dt.datetime.now().isoformat(timespec="seconds"),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cpus": str(os.cpu_count()),
        "load_average_at_start": " ".join(f"{x:.2f}" for x in os.getloadavg()),
        "redis": redis.strip(),
        "echomq": echomq.__version__,
        "echomq_source": str(Path(echomq.__file__).parent),
        "echomq_commit": _commit(Path(echomq.__file__).parent),
        "echomq_src_commit": _src_commit(Path(echomq.__file__).parent),
    }


def _src_commit(where: Path) -> str:
    """The last commit that changed echomq's source (stable across rebases of other files)."""
    try:
        return subprocess.run(
            ["git", "log", "-1", "--format=%h", "--", "."],
            cwd=where,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def _commit(where: Path) -> str:
    """The git commit of the echomq being measured ('+dirty' if its tree has edits)."""
    stamp = where.parent.parent / "COMMIT"  # written by benchmarks/snapshot.sh
    if stamp.exists():
        return stamp.read_text().strip() + " (snapshot)"
    try:
        head = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            cwd=where,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--", "."],
            cwd=where,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown (not a git checkout: see the snapshot notes in README)"
    return head + ("+dirty" if dirty else "")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python -m benchmarks",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "what",
        choices=[
            "verbs",
            "first",
            "e2e",
            "peers",
            "archive",
            "results",
            "cluster",
            "flows",
            "all",
            "report",
            "bounds",
            "lanes",
            "ecosystem",
        ],
    )
    p.add_argument(
        "--part", choices=["hooks", "producers", "e2e", "all"], default="all", help="`ecosystem`"
    )
    p.add_argument("--producer-jobs", type=int, default=20_000, help="`ecosystem`: per figure")
    p.add_argument(
        "--baseline", help="`ecosystem`: the git ref to compare with (default: merge-base main)"
    )
    p.add_argument("--scrape-every", type=float, default=1.0, help="`ecosystem`: seconds")
    p.add_argument(
        "--variants",
        default="baseline,hooks,otel-api,metrics",
        help="`ecosystem` e2e: of baseline,hooks,otel-api,metrics,metrics-idle",
    )
    p.add_argument(
        "--reps", type=int, default=None, help="repetitions (medians; default 5, bounds 20)"
    )
    p.add_argument("--queue-jobs", type=int, default=1_000_000, help="pending jobs for `bounds`")
    p.add_argument("--render", action="store_true", help="bounds, cluster, flows: tables only")
    p.add_argument("--scale", type=float, default=1.0, help="multiply every operation count")
    p.add_argument("--quick", action="store_true", help="a small validation run (--scale 0.1)")
    p.add_argument("--callers", default="1,16,64,256", help="concurrent callers for `verbs`")
    p.add_argument("--jobs", type=int, default=10_000, help="jobs per end-to-end run")
    p.add_argument("--latency-jobs", type=int, default=500, help="round trips for the latency")
    p.add_argument(
        "--latency-seconds",
        type=float,
        default=20.0,
        help="stop the latency round trips after this long (once 20 are in): slow pollers",
    )
    p.add_argument("--bulk-jobs", type=int, default=10_000, help="jobs for the bulk figure")
    p.add_argument("--drain-jobs", type=int, default=10_000, help="the backlog to drain")
    p.add_argument(
        "--no-big-drain",
        dest="big_drain",
        action="store_false",
        help="skip the 100,000-job drain (else run where projected under 2 minutes)",
    )
    p.add_argument("--concurrency", type=int, default=100, help="worker concurrency (all)")
    p.add_argument("--peer", action="append", help="only these peers (repeatable)")
    p.add_argument("--archive-rate", type=float, default=9000.0, help="`archive`: entries/s")
    p.add_argument("--archive-seconds", type=float, default=20.0, help="`archive`: producing")
    p.add_argument("--archive-backlog", type=int, default=100_000, help="`archive`: drain size")
    p.add_argument("--archive-stores", default="sqlite,postgresql", help="`archive`: stores")
    p.add_argument(
        "--results-parts", default="stream,archive,memory", help="`results`: which parts"
    )
    p.add_argument(
        "--results-seconds", type=float, default=20.0, help="`results`: producing, archive part"
    )
    p.add_argument("--memory-jobs", type=int, default=1_000_000, help="`results`: memory part")
    p.add_argument("--cluster-queues", type=int, default=3, help="`cluster`: queues")
    p.add_argument("--cluster-jobs", type=int, default=20_000, help="`cluster`: backlog/queue")
    p.add_argument("--cluster-seconds", type=float, default=8.0, help="`cluster`: the window")
    p.add_argument("--lanes-parts", default="fairness,claim,rate", help="`lanes`: the sections")
    p.add_argument("--rate-seconds", type=int, default=30, help="`lanes`: the rate run's length")
    p.add_argument("--flows-parts", default="chord,soak,hotpath", help="`flows`: which parts")
    p.add_argument("--chord-members", type=int, default=10_000, help="`flows`: the chord's size")
    p.add_argument("--base", default="main", help="`flows` hotpath: the commit to compare with")
    p.add_argument("--soak-reps", type=int, default=1, help="`flows`: soak runs")
    p.add_argument("--soak-mids", type=int, default=40, help="`flows`: chords in the soak")
    p.add_argument("--soak-leaves", type=int, default=100, help="`flows`: leaves per chord")
    p.add_argument("--soak-leaf-seconds", type=float, default=0.1, help="`flows`: a leaf's run")
    p.add_argument("--soak-workers", type=int, default=3, help="`flows`: worker processes")
    p.add_argument("--soak-concurrency", type=int, default=16, help="`flows`: per worker")
    p.add_argument("--soak-kill-every", type=float, default=1.0, help="`flows`: seconds")
    p.add_argument("--soak-max-stalled", type=int, default=20, help="`flows`: workers' option")
    p.add_argument("--soak-lease", type=float, default=1.0, help="`flows`: the tasks' lease")
    p.add_argument("--json", type=Path, help="where to save the results (default: results/)")
    p.add_argument(
        "--from", dest="sources", type=Path, nargs="*", default=[], help="results file to report"
    )
    p.add_argument(
        "--write",
        action="store_true",
        help="report: rewrite the generated blocks of benchmarks/README.md and README.md",
    )
    return p.parse_args(argv)


async def amain(args: argparse.Namespace) -> Results:
    from . import verbs

    scale = args.scale * (0.1 if args.quick else 1.0)
    total = Results(meta={**machine(), "argv": " ".join(sys.argv[1:])})
    if args.what in ("verbs", "first", "all"):
        callers = (
            (1, 64) if args.what == "first" else tuple(int(c) for c in args.callers.split(","))
        )
        with RedisServer() as server:
            log(f"verbs: redis-server on port {server.port}")
            res = await verbs.run_verbs(
                server.url, server.port, verbs.Scale(scale, callers), args.reps, log=log
            )
        print(res.table("claim / extend / enqueue through the verbs (one connection)"), flush=True)
        total.merge(res)
    if args.what in ("e2e", "all"):
        from . import runtime

        res = await runtime.run_e2e(args, log=log)
        print(res.table("echomq end to end"), flush=True)
        total.merge(res)
    if args.what == "archive":
        from .archive import run_archive

        res = await run_archive(args, log=log)
        print(res.table("the durable archive (issue 11)"), flush=True)
        total.merge(res)
    if args.what == "results":
        from .results import run_results

        res = await run_results(args, log=log)
        print(res.table("the completions stream, the live archive, memory (issue 11)"), flush=True)
        total.merge(res)
    if args.what == "cluster":
        from .cluster import run_cluster

        res = await run_cluster(args, log=log)
        print(res.table("one node vs a Redis Cluster (issue 16)"), flush=True)
        total.merge(res)
    if args.what == "flows":
        from .flows import run_flows

        res = await run_flows(args, log=log)
        print(res.table("flows (issue 14)"), flush=True)
        total.merge(res)
    if args.what in ("peers", "all"):
        from .peers import harness

        res = await harness.run_peers(args, log=log)
        print(res.table("peers end to end"), flush=True)
        total.merge(res)
    return total


def report(sources: list[Path], *, write: bool) -> None:
    from .report import Report, render_blocks, render_ecosystem, write_blocks

    if len(sources) != 1:
        raise SystemExit("report: give one results file (--from benchmarks/results/....json)")
    found = Report(sources[0])
    is_ecosystem = str(found.meta.get("argv", "")).startswith("ecosystem")
    blocks = render_ecosystem(found) if is_ecosystem else render_blocks(found)
    for name, body in blocks.items():
        print(f"<!-- {name} -->\n{body}\n")
    if write:
        root = Path(__file__).resolve().parent
        for path in (root / "README.md", root.parent / "README.md"):
            log(f"{path}: replaced {', '.join(write_blocks(blocks, path)) or 'nothing'}")


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    if args.what == "bounds":
        from . import bounds

        bounds.main(args.queue_jobs, args.reps or 20, render_only=args.render)
        return
    if args.what == "flows" and args.render:
        from . import flows

        main_file, *extra = args.sources or [flows.PUBLISHED / "flows-20261201.json"]
        body = flows.render(main_file, extra)
        print(body)
        if args.write:
            log(f"benchmarks/README.md: replaced {', '.join(flows.write(body)) or 'nothing'}")
        return
    if args.what == "cluster" and args.render:
        from . import cluster

        body = cluster.render(args.sources[0] if args.sources else cluster.newest_published())
        print(body)
        if args.write:
            log(f"benchmarks/README.md: replaced {', '.join(cluster.write(body)) or 'nothing'}")
        return
    args.reps = args.reps or (3 if args.what == "cluster" else 5)
    if args.what == "lanes":
        from . import lanes

        found = trio.run(lambda: lanes.run_lanes(args, log=log))
        path = args.json or lanes.SAVED
        lanes.save(found, {**machine(), "argv": " ".join(sys.argv[1:])}, path)
        print(lanes.tables(found), flush=True)
        log(f"saved {path}")
        return
    if args.what == "ecosystem":
        from . import ecosystem

        ecosystem.main(args, log, machine())
        return
    if args.what == "report":
        report(args.sources, write=args.write)
        return
    if args.quick and args.jobs == 10_000:
        args.jobs, args.latency_jobs = 1_000, 100
    results = trio.run(amain, args)
    results.meta["load_average_at_end"] = " ".join(f"{x:.2f}" for x in os.getloadavg())
    path = args.json or RESULTS_DIR / f"{args.what}-{dt.datetime.now():%Y%m%d-%H%M%S}.json"
    results.save(path)
    log(f"saved {path}")
    if args.what in ("all", "peers"):
        report([path], write=False)


if __name__ == "__main__":
    main()
