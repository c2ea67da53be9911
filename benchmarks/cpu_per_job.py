"""CPU per job of the worker process and of redis-server while a fresh worker drains a
backlog (the ``drain`` figure's scenario, with echomq's own benchmark adapter).

    .venv/bin/python -m benchmarks.cpu_per_job [--jobs 20000] [--reps 3]
        [--base PATH/TO/OTHER/src --base-name main] [--json FILE]

Per repetition: a private redis-server, N jobs enqueued in bulk, then a worker process
that was started (imports done) before the clock starts; CPU seconds from /proc of the
worker and of the server between the start signal and the last completion, divided by N.
``--base``: a second echomq source tree (e.g. ``git archive main src | tar -x -C /tmp/x``)
measured in turns with this one, so both see the same machine load. The machine's busy
share (/proc/stat) is recorded too: on a 2-core box a drain is CPU bound when it is near 1,
and its rate then follows the CPU per job of both processes.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import redis

from echomq.testing import RedisServer

PEERS = Path(__file__).resolve().parent / "peers"
_ADAPTER = "import _common, peer_echomq as a; "
_WORKER = _ADAPTER + "import sys; print('ready', flush=True); sys.stdin.readline(); _common.main(a)"


def _cpu(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _busy() -> list[int]:
    return [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]


def one(url: str, server_pid: int, jobs: int, src: str | None) -> dict[str, Any]:
    path = os.pathsep.join(p for p in (str(PEERS), src) if p)
    env = dict(os.environ, PYTHONPATH=path, PYTHONUNBUFFERED="1")
    py = sys.executable
    fill = [py, "-c", _ADAPTER + "_common.main(a)", "drain", "--url", url, "--jobs", str(jobs)]
    drain = subprocess.Popen(fill, cwd=PEERS, env=env, stdout=subprocess.PIPE)
    serve = [py, "-c", _WORKER, "worker", "--url", url]
    worker = subprocess.Popen(
        serve, cwd=PEERS, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE
    )
    assert drain.stdout is not None and worker.stdout is not None and worker.stdin is not None
    try:
        drain.stdout.readline()  # prefilled
        worker.stdout.readline()  # imported, not serving yet
        b0, w0, s0 = _busy(), _cpu(worker.pid), _cpu(server_pid)
        worker.stdin.write(b"go\n")
        worker.stdin.flush()
        out = json.loads(drain.communicate(timeout=600)[0].decode().strip().splitlines()[-1])
        w1, s1, b1 = _cpu(worker.pid), _cpu(server_pid), _busy()
    finally:
        worker.terminate()
        worker.wait(timeout=30)
    d = [b - a for a, b in zip(b0, b1, strict=True)]
    return {
        "drain_per_s": out["drain_per_s"],
        "worker_us_per_job": (w1 - w0) / jobs * 1e6,
        "redis_us_per_job": (s1 - s0) / jobs * 1e6,
        "machine_busy": 1 - (d[3] + d[4]) / sum(d),
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--jobs", type=int, default=20_000)
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--base", help="another echomq src tree, measured in turns with this one")
    p.add_argument("--base-name", default="base")
    p.add_argument("--json", type=Path)
    args = p.parse_args()
    trees: dict[str, str | None] = {"this": None}
    if args.base:
        trees = {args.base_name: args.base, "this": None}
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name in trees}
    with RedisServer() as server:
        assert server.process is not None
        r = redis.Redis.from_url(server.url)
        for rep in range(args.reps):
            for name, src in trees.items():
                r.flushall()
                got = one(server.url, server.process.pid, args.jobs, src)
                runs[name].append(got)
                print(f"rep {rep} {name:>8}: " + "  ".join(f"{k} {v:,.2f}" for k, v in got.items()))
    summary = {
        name: {k: statistics.median(x[k] for x in xs) for k in xs[0]} for name, xs in runs.items()
    }
    for name, med in summary.items():
        print(f"median {name:>8}: " + "  ".join(f"{k} {v:,.2f}" for k, v in med.items()))
    if args.json:
        doc = {
            "jobs": args.jobs,
            "reps": args.reps,
            "date": time.strftime("%Y-%m-%dT%H:%M:%S"),
            "load_average": os.getloadavg(),
            "trees": trees,
            "median": summary,
            "runs": runs,
        }
        args.json.write_text(json.dumps(doc, indent=1) + "\n")


if __name__ == "__main__":
    main()
