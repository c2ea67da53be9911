"""Redis's cost per job of the drain's two scripts, claim and complete_many, without a worker.

    python -m benchmarks lua_cost [--jobs 20000] [--claim 50] [--complete 100] [--reps 5]
        [--base REV|SRC --base-name main] [--publish]

What the server spends per claimed and per completed job, and how much of it is the
commands themselves (the floor a script cannot go under) and how much the Lua around them.

Per repetition and tree (trees in turns: both see the same machine load), in a child
process importing that tree's echomq: a private redis-server, ``jobs`` enqueued in bulk
(the drain's no-op payload, task ``noop``), then claim calls of ``--claim`` jobs until
pending is empty, then complete_many calls of ``--complete`` jobs (result ``null``), one
call at a time on one redis-py connection. For each phase, from ``INFO commandstats``
(reset before it): ``script_us`` = EVALSHA's server time per job, ``commands_us`` = the
time of the commands the script ran per job (the floor: the same commands sent by a
script with no logic), ``lua_us`` = the difference (the interpreter: redis.call's own
overhead, tables, strings), ``calls`` = commands per job by name; and ``cpu_us`` =
redis-server's CPU per job (/proc schedstat; includes reading the request and writing the
reply). On a shared machine ``cpu_us`` is the steadier figure: commandstats time is wall
time, which grows when the server is descheduled mid-script.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

from . import files, machine, tables, turns

PAYLOAD = b'{"task":"noop","args":["' + b"x" * 58 + b'"],"kwargs":{}}'


def _cpu(pid: int) -> float:
    """Seconds the process's threads ran on a CPU (schedstat: ns, unlike /proc/pid/stat's
    10 ms ticks, and not inflated when the process waits for a busy core)."""
    tasks = Path(f"/proc/{pid}/task")
    return sum(int((t / "schedstat").read_text().split()[0]) for t in tasks.iterdir()) / 1e9


def _stats(r: Any) -> dict[str, tuple[int, int]]:
    out = {}
    for name, s in r.info("commandstats").items():
        out[name.removeprefix("cmdstat_")] = (int(s["calls"]), int(s["usec"]))
    return out


class _Meter:
    """Per-phase totals of redis-server's CPU and of INFO commandstats, from deltas around
    each script call (the server is idle between this client's calls)."""

    def __init__(self, r: Any, pid: int) -> None:
        self.r, self.pid = r, pid
        self.last = _stats(r)
        self.cpu: dict[str, float] = {}
        self.jobs: dict[str, int] = {}
        self.stats: dict[str, dict[str, list[int]]] = {}

    def call(self, phase: str, jobs: int, run: Any) -> Any:
        c0 = _cpu(self.pid)
        out = run()
        c1 = _cpu(self.pid)
        now = _stats(self.r)
        self.cpu[phase] = self.cpu.get(phase, 0.0) + c1 - c0
        self.jobs[phase] = self.jobs.get(phase, 0) + jobs
        acc = self.stats.setdefault(phase, {})
        for name, (calls, us) in now.items():
            if name == "info":
                continue
            c, u = self.last.get(name, (0, 0))
            if calls > c:
                tot = acc.setdefault(name, [0, 0])
                tot[0] += calls - c
                tot[1] += us - u
        self.last = now
        return out

    def phase(self, phase: str) -> dict[str, Any]:
        jobs, st = self.jobs[phase], dict(self.stats[phase])
        script = st.pop("evalsha", [0, 0])
        cmds = sum(us for _, us in st.values())
        return {
            "script_us": script[1] / jobs,
            "commands_us": cmds / jobs,
            "lua_us": (script[1] - cmds) / jobs,
            "cpu_us": self.cpu[phase] / jobs * 1e6,
            "script_calls": script[0],
            "calls": {k: round(n / jobs, 3) for k, (n, _) in sorted(st.items())},
            "command_us": {k: round(us / jobs, 3) for k, (_, us) in sorted(st.items())},
        }


def child(jobs: int, claim: int, complete: int, held_cap: int) -> dict[str, Any]:
    import redis

    from echomq._model.job import NewJob
    from echomq.testing import RedisServer

    try:
        from echomq._scripts.calls import evaluate_sync
        from echomq.jobs import lifecycle as calls
    except ImportError:  # an echomq from before the _scripts layer (a --base run of 0.1)
        from echomq._redis.scripts import evaluate_sync  # type: ignore[no-redef]
        from echomq._verbs import lifecycle as calls  # type: ignore[no-redef]

    queue = "bench"
    base = f"emq:{{{queue}}}:"
    with RedisServer() as server:
        assert server.process is not None
        r = redis.Redis.from_url(server.url)
        batch = [NewJob(payload=PAYLOAD, task="noop")] * 250
        for _ in range(jobs // 250):
            evaluate_sync(r, calls.enqueue_call(queue, batch))
        n = jobs // 250 * 250
        claim_call = calls.claim_batch_call(queue, 600_000, claim, "bench-worker")
        floor_claim = r.register_script(FLOOR_CLAIM)
        floor_complete = r.register_script(FLOOR_COMPLETE)
        r.script_load(FLOOR_CLAIM)  # loaded before the meter starts
        r.script_load(FLOOR_COMPLETE)
        evaluate_sync(r, calls.complete_many_call(queue, [("none", 1, b"")]))
        m = _Meter(r, server.process.pid)

        def drain(claim_one: Any, complete_some: Any) -> list[str]:
            # as a worker drains: claims while it holds fewer than held_cap jobs, then
            # completes the oldest it holds (active stays small, as in a drain)
            held: list[tuple[str, int]] = []
            order: list[str] = []
            claimed = 0
            while claimed < n or held:
                if claimed < n and len(held) < held_cap:
                    got = claim_one()
                    held += got
                    order += [jid for jid, _ in got]
                    claimed += len(got)
                else:
                    done, held = held[:complete], held[complete:]
                    complete_some(done)
            return order

        def claim_one() -> list[tuple[str, int]]:
            got = m.call("claim", claim, lambda: evaluate_sync(r, claim_call))
            return [(j.id, j.token) for j in got.jobs]

        def complete_some(done: list[tuple[str, int]]) -> None:
            sc = calls.complete_many_call(queue, [(jid, tok, b"null") for jid, tok in done])
            m.call("complete_many", len(done), lambda: evaluate_sync(r, sc))

        ids = drain(claim_one, complete_some)
        assert r.zcard(base + "active") == 0
        # the floors, on the same rows (now finished; the fields are rewritten as the
        # scripts do), put back in pending in the same order
        r.zadd(base + "pending", {jid: k for k, jid in enumerate(ids)})

        def fclaim_one() -> list[tuple[str, int]]:
            got = m.call(
                "floor_claim", claim, lambda: floor_claim([base + "active"], [base, claim])
            )
            return [(got[i].decode(), 1) for i in range(0, len(got), 5)]

        def fcomplete_some(done: list[tuple[str, int]]) -> None:
            args = [base, *(jid for jid, _ in done)]
            m.call("floor_complete", len(done), lambda: floor_complete([base + "active"], args))

        drain(fclaim_one, fcomplete_some)
        assert r.zcard(base + "active") == 0
        return {p: m.phase(p) for p in ("claim", "complete_many", "floor_claim", "floor_complete")}


# The floors: each script's per-job commands (and its per-call commands whose arguments
# grow with the jobs), with every number argument a string made once, and no other logic.
# claim: the ids read from pending (again: the same ids, put back), per job HMGET the row,
# HSET it, PUBLISH active; the ids out of pending and into active.
FLOOR_CLAIM = """
local base, out, leases, n = ARGV[1], {}, {}, 0
local t = redis.call('TIME')
local now = tostring(t[1] * 1000)
local ids = redis.call('ZRANGE', base .. 'pending', 0, tonumber(ARGV[2]) - 1)
for i, id in ipairs(ids) do
  local row = base .. 'job:' .. id
  local f = redis.call('HMGET', row, 'payload', 'failures', 'trace', 'token')
  redis.call('HSET', row, 'token', '1', 'state', 'active', 'lease_epoch', 'x',
    'claimed_at', now, 'worker', 'w')
  redis.call('PUBLISH', base .. 'events', '{"event":"active","job":"' .. id .. '","attempt":1}')
  leases[i * 2 - 1], leases[i * 2] = now, id
  out[n + 1], out[n + 2], out[n + 3], out[n + 4], out[n + 5] = id, f[1], 1, 0, f[3]
  n = n + 5
end
redis.call('ZREM', base .. 'pending', unpack(ids))
redis.call('ZADD', KEYS[1], unpack(leases))
return out
"""
# complete_many: the membership (ZMSCORE), the logs (EXISTS), per job HMGET, HSET, PUBLISH
# completed, XADD its entry, PEXPIRE the row; the ids out of active and into the index.
FLOOR_COMPLETE = """
local base, out, logs, index = ARGV[1], {}, {}, {}
local t = redis.call('TIME')
local now = tostring(t[1] * 1000)
local ids = {unpack(ARGV, 2)}
redis.call('ZMSCORE', KEYS[1], unpack(ids))
for i, id in ipairs(ids) do logs[i] = base .. 'job:' .. id .. ':logs' end
redis.call('EXISTS', unpack(logs))
for i, id in ipairs(ids) do
  local row = base .. 'job:' .. id
  local f = redis.call('HMGET', row, 'token', 'state', 'group', 'task', 'token',
    'failures', 'created_at', 'claimed_at', 'keep_result', 'parent', 'kids', 'parent_queue')
  redis.call('HSET', row, 'state', 'completed', 'result', 'null', 'finished_at', now)
  redis.call('PUBLISH', base .. 'events', '{"event":"completed","job":"' .. id .. '"}')
  redis.call('XADD', base .. 'floor', '*', 'id', id, 'state', 'completed', 'token', '1',
    'task', 'noop', 'result', 'null', 'failures', '0', 'created_at', now, 'claimed_at', now,
    'finished_at', now)
  redis.call('PEXPIRE', row, '86400000')
  index[i * 2 - 1], index[i * 2] = now, id
  out[i] = 1
end
redis.call('ZREM', KEYS[1], unpack(ids))
redis.call('ZADD', base .. 'completed', unpack(index))
return out
"""


KEYS = ("script_us", "commands_us", "lua_us", "cpu_us")


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m benchmarks lua_cost",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--jobs", type=int, default=20_000)
    p.add_argument("--claim", type=int, default=50, help="claim count per call")
    p.add_argument("--complete", type=int, default=100, help="jobs per complete_many call")
    p.add_argument("--held", type=int, default=100, help="jobs held at most (a worker's slots)")
    p.add_argument("--base", help="another echomq (git revision or src folder), in turns")
    p.add_argument("--base-name", default="base", help="its name in the tables")
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    files.add_arguments(p, reps=5)
    return p


def main(argv: list[str] | None = None) -> None:
    args = parser().parse_args(argv)
    if args.child:
        print(json.dumps(child(args.jobs, args.claim, args.complete, args.held)))
        return
    meta = machine.describe("lua_cost", argv)
    here = str(turns.this_src())
    trees = {"this": here}
    if args.base:
        trees = {args.base_name: str(turns.src_of(args.base)), "this": here}
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name in trees}
    for rep in range(args.reps):
        for name, src in turns.rotate(list(trees.items()), rep):
            env = dict(os.environ, PYTHONPATH=os.pathsep.join([src, str(turns.REPO)]))
            cmd = [sys.executable, "-m", "benchmarks.lua_cost", "--child"]
            cmd += ["--jobs", str(args.jobs), "--claim", str(args.claim)]
            cmd += ["--complete", str(args.complete), "--held", str(args.held)]
            got = json.loads(subprocess.run(cmd, env=env, check=True, capture_output=True).stdout)
            runs[name].append(got)
            for phase, v in got.items():
                print(
                    f"rep {rep} {name:>6} {phase:>13}: "
                    + "  ".join(f"{k} {v[k]:6.2f}" for k in KEYS),
                    flush=True,
                )
    summary = {
        name: {
            phase: {k: statistics.median(x[phase][k] for x in xs) for k in KEYS}
            | {"calls": xs[-1][phase]["calls"], "command_us": xs[-1][phase]["command_us"]}
            for phase in xs[0]
        }
        for name, xs in runs.items()
    }
    for name, med in summary.items():
        for phase, v in med.items():
            print(f"median {name:>6} {phase:>13}: " + "  ".join(f"{k} {v[k]:6.2f}" for k in KEYS))
            print(f"    calls per job: {v['calls']}")
            print(f"    us per job: {v['command_us']}")
    doc = {
        "meta": machine.finish(meta),
        "jobs": args.jobs,
        "claim_count": args.claim,
        "complete_batch": args.complete,
        "held": args.held,
        "reps": args.reps,
        "trees": list(trees),
        "median": summary,
        "runs": runs,
    }
    files.save("lua_cost", doc, args)


PHASES = {
    "claim": "claim.lua",
    "complete_many": "complete_many.lua",
    "floor_claim": "the claim's per-job commands in a bare script",
    "floor_complete": "the completion's per-job commands in a bare script",
}


def readme(doc: dict[str, Any], source: str) -> str:
    head = ("µs of redis-server per job", "tree", "script (commandstats)", "its commands",
            "Lua around them", "CPU (schedstat)")  # fmt: skip
    rows = []
    for phase, title in PHASES.items():
        for tree, med in doc["median"].items():
            if phase in med:
                v = med[phase]
                rows.append((title, tree, *(tables.num(v[k], 2) for k in KEYS)))
    setup = (
        f"{doc['jobs']:,} jobs claimed {doc['claim_count']} per call (at most {doc['held']} "
        f"held) and completed {doc['complete_batch']} per call; medians."
    )
    meta = tables.meta_of(doc)
    return (
        tables.conditions(meta, reps=doc.get("reps"), source=source, extra=setup)
        + "\n\n"
        + tables.markdown(head, rows)
    )


if __name__ == "__main__":
    main()
