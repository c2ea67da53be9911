"""Redis-side cost per job of the drain's two scripts, claim and complete_many, without a
worker: what the server spends per claimed and per completed job, and how much of it is
the commands themselves (the floor a script cannot go under) and how much the Lua around
them.

    .venv/bin/python -m benchmarks.lua_cost [--jobs 20000] [--claim 50] [--complete 100]
        [--reps 5] [--base PATH/TO/OTHER/src --base-name main] [--json FILE]

Per repetition and tree (trees in turns: both see the same machine load), in a child
process importing that tree's echomq: a private redis-server, ``jobs`` enqueued in bulk
(the drain's no-op payload, task ``noop``), then claim calls of ``--claim`` jobs until
pending is empty, then complete_many calls of ``--complete`` jobs (result ``null``), one
call at a time on one redis-py connection. For each phase, from ``INFO commandstats``
(reset before it): ``script_us`` = EVALSHA's server time per job, ``commands_us`` = the
time of the commands the script ran per job (the floor: the same commands sent by a
script with no logic), ``lua_us`` = the difference (the interpreter: redis.call's own
overhead, tables, strings), ``calls`` = commands per job by name; and ``cpu_us`` =
redis-server's CPU per job from /proc (includes reading the request and writing the
reply).
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

PAYLOAD = b'{"task":"noop","args":["' + b"x" * 58 + b'"],"kwargs":{}}'


def _cpu(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _stats(r: Any) -> dict[str, tuple[int, int]]:
    out = {}
    for name, s in r.info("commandstats").items():
        out[name.removeprefix("cmdstat_")] = (int(s["calls"]), int(s["usec"]))
    return out


def _phase(r: Any, pid: int, jobs: int, run: Any) -> dict[str, Any]:
    r.config_resetstat()
    c0 = _cpu(pid)
    run()
    c1 = _cpu(pid)
    st = _stats(r)
    st.pop("info", None)
    script = st.pop("evalsha", (0, 0))
    cmds = sum(us for _, us in st.values())
    return {
        "script_us": script[1] / jobs,
        "commands_us": cmds / jobs,
        "lua_us": (script[1] - cmds) / jobs,
        "cpu_us": (c1 - c0) / jobs * 1e6,
        "script_calls": script[0],
        "calls": {k: round(n / jobs, 3) for k, (n, _) in sorted(st.items())},
        "command_us": {k: round(us / jobs, 3) for k, (_, us) in sorted(st.items())},
    }


def child(jobs: int, claim: int, complete: int) -> dict[str, Any]:
    import redis

    from echomq._model.job import NewJob
    from echomq._redis.scripts import evaluate_sync
    from echomq._verbs import lifecycle as calls
    from echomq.testing import RedisServer

    queue = "bench"
    with RedisServer() as server:
        assert server.process is not None
        pid = server.process.pid
        r = redis.Redis.from_url(server.url)
        batch = [NewJob(payload=PAYLOAD, task="noop")] * 250
        for _ in range(jobs // 250):
            evaluate_sync(r, calls.enqueue_batch_call(queue, batch))
        n = jobs // 250 * 250
        held: list[tuple[str, int]] = []
        claim_call = calls.claim_batch_call(queue, 600_000, claim, "bench-worker")

        def claims() -> None:
            while len(held) < n:
                got = evaluate_sync(r, claim_call)
                held.extend((j.id, j.token) for j in got.jobs)

        def completes() -> None:
            for i in range(0, n, complete):
                done = [(jid, tok, b"null") for jid, tok in held[i : i + complete]]
                evaluate_sync(r, calls.complete_many_call(queue, done))

        out = {"claim": _phase(r, pid, n, claims), "complete_many": _phase(r, pid, n, completes)}
        assert r.zcard(f"emq:{{{queue}}}:active") == 0
        # the floor: the same per-job commands from a script with no other logic, on the
        # same rows (now finished; the fields are rewritten as the scripts do)
        base = f"emq:{{{queue}}}:"
        floor_claim = r.register_script(FLOOR_CLAIM)
        floor_complete = r.register_script(FLOOR_COMPLETE)
        ids = [jid for jid, _ in held]

        r.zadd(base + "pending", {jid: k for k, jid in enumerate(ids)})

        def fclaims() -> None:
            for _ in range(0, n, claim):
                floor_claim(keys=[base + "active"], args=[base, claim])

        def fcompletes() -> None:
            for i in range(0, n, complete):
                floor_complete(keys=[base + "active"], args=[base, *ids[i : i + complete]])

        out["floor_claim"] = _phase(r, pid, n, fclaims)
        out["floor_complete"] = _phase(r, pid, n, fcompletes)
        return out


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
  local f = redis.call('HMGET', row, 'payload', 'failures', 'trace', 'attempts')
  redis.call('HSET', row, 'attempts', '1', 'state', 'active', 'lease_epoch', 'x',
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
  local f = redis.call('HMGET', row, 'attempts', 'state', 'group', 'task', 'attempts',
    'failures', 'created_at', 'claimed_at', 'keep_result', 'parent', 'kids', 'parent_queue')
  redis.call('HSET', row, 'state', 'completed', 'result', 'null', 'finished_at', now)
  redis.call('PUBLISH', base .. 'events', '{"event":"completed","job":"' .. id .. '"}')
  redis.call('XADD', base .. 'floor', '*', 'id', id, 'state', 'completed', 'attempts', '1',
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


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--jobs", type=int, default=20_000)
    p.add_argument("--claim", type=int, default=50, help="claim count per call")
    p.add_argument("--complete", type=int, default=100, help="jobs per complete_many call")
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--base", help="another echomq src tree, measured in turns with this one")
    p.add_argument("--base-name", default="base")
    p.add_argument("--json", type=Path)
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        print(json.dumps(child(args.jobs, args.claim, args.complete)))
        return
    here = str(Path(__file__).resolve().parents[1] / "src")
    trees = {"this": here}
    if args.base:
        trees = {args.base_name: str(Path(args.base).resolve()), "this": here}
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name in trees}
    for rep in range(args.reps):
        for name, src in trees.items():
            env = dict(os.environ, PYTHONPATH=os.pathsep.join([src, str(Path(here).parent)]))
            cmd = [sys.executable, "-m", "benchmarks.lua_cost", "--child"]
            cmd += ["--jobs", str(args.jobs), "--claim", str(args.claim)]
            cmd += ["--complete", str(args.complete)]
            got = json.loads(subprocess.run(cmd, env=env, check=True, capture_output=True).stdout)
            runs[name].append(got)
            for phase, v in got.items():
                print(
                    f"rep {rep} {name:>6} {phase:>13}: "
                    + "  ".join(f"{k} {v[k]:6.2f}" for k in KEYS)
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
    if args.json:
        doc = {
            "what": "lua_cost",
            "jobs": args.jobs,
            "claim_count": args.claim,
            "complete_batch": args.complete,
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
