"""The Redis floor of a job, and what a drain at 2x BullMQ's Node worker would need here.

    python -m benchmarks floor [--reps 3] [--floor-jobs 20000] [--batch 50]
        [--drain 10000 --drain 100000] [--publish]

Three measurements per repetition, each system or variant in turns on one private
redis-server (persistence off; flushed between turns), then the arithmetic:

1. ``drain``: the peers benchmark's drain (N jobs prefilled in bulk by the adapter, a fresh
   worker, concurrency 100, no-op job) for echomq and BullMQ Node, with the CPU per job of
   the worker process and of redis-server from /proc (:mod:`benchmarks.cpu_per_job`; the
   ``*_run`` figures are from the first completion to the last, the window of the drain
   rate) and the server's commands per job (INFO commandstats, script commands included).
2. ``floor``: redis-server CPU per job for claim + complete of N prefilled jobs (echomq's
   own bulk enqueue), ``--batch`` jobs per call as the worker's claims, sent by this
   process one call at a time, four ways: ``scripts`` (claim.lua then complete_many.lua,
   with the worker's arguments), ``floor_lua`` (a bare script pair doing only the per-job
   commands: claim HMGET row, HSET row, PUBLISH; complete HMGET, HSET, PUBLISH, XADD
   completions, PEXPIRE row), ``floor_lua_sets`` (the same, plus the per-call set moves a
   queue cannot skip: ZREM pending, ZADD active, ZMSCORE and ZREM active, ZADD completed,
   HINCRBY the counter) and ``plain`` (floor_lua's commands pipelined without Lua: four
   round trips per batch).
3. ``arithmetic``: what a drain at 2x BullMQ leaves per job, against echomq's figures,
   two ways: from the run's rates (1 / (2 x BullMQ's rate), the machine's load included),
   and from CPU per job: on 2 cores a drain's time per job is at least
   :func:`bound_us` = max(worker's main thread, redis-server, (worker + redis-server) / 2),
   so 2x BullMQ's bound leaves half of it to each of echomq's processes.

Also recorded per repetition: redis-benchmark's ceiling (PING -P16 -c50, -P1 -c1) on a
fresh server, and the load average. ``--from FILE [--from FILE2] [--json OUT]``: runs'
figures (several runs' repetitions together) printed again, or saved as one file.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import time
import uuid
from pathlib import Path
from typing import Any

import redis
import trio

from echomq._scripts.calls import SCRIPTS
from echomq._scripts.keyspace import Keyspace
from echomq.jobs.lifecycle import claim_batch_call, complete_many_call
from echomq.testing import RedisServer

from . import cpu_per_job, files, machine, tables
from .ceiling import redis_benchmark

QUEUE = cpu_per_job.QUEUE
KS = Keyspace(QUEUE)
RESULT = b'"ok"'  # the worker's encoded result of the no-op
LEASE_MS = 30_000
DAY_MS = 86_400_000  # the default keep_result and completions_keep (include/finished.lua)
SYSTEMS = ("echomq", "bullmq-node")
VARIANTS = ("scripts", "floor_lua", "floor_lua_sets", "plain")
CLAIM_FIELDS = ("payload", "failures", "trace", "token")
# complete_many's one HMGET per job: its checks' fields, then finish_fields('completed')
COMPLETE_FIELDS = ("token", "state", "group", "task", "token", "failures", "created_at",
                   "claimed_at", "keep_result", "parent", "kids", "parent_queue")  # fmt: skip

# ARGV: base, worker, now, lease epoch, ids...; KEYS (floor_lua_sets only): pending, active
FLOOR_CLAIM = """
local base, worker, now, epoch = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
local channel = base .. 'events'
local out, ids, leases = {}, {}, {}
for i = 5, #ARGV do
  local id = ARGV[i]
  local row = base .. 'job:' .. id
  local f = redis.call('HMGET', row, 'payload', 'failures', 'trace', 'token')
  local token = tonumber(f[4] or '0') + 1
  redis.call('HSET', row, 'token', token, 'state', 'active', 'lease_epoch', epoch,
    'claimed_at', now, 'worker', worker)
  redis.call('PUBLISH', channel,
    '{"event":"active","job":"' .. id .. '","attempt":' .. token .. '}')
  out[#out + 1] = id
  out[#out + 1] = f[1]
  out[#out + 1] = token
  out[#out + 1] = tonumber(f[2] or '0')
  out[#out + 1] = f[3]
  ids[#ids + 1] = id
  leases[#leases + 1] = now + 30000
  leases[#leases + 1] = id
end
if #KEYS > 0 and #ids > 0 then
  redis.call('ZREM', KEYS[1], unpack(ids))
  redis.call('ZADD', KEYS[2], unpack(leases))
end
return out
"""
# ARGV: base, now, keep ms, then (id, token, result) triples; KEYS (sets): active, completed
FLOOR_COMPLETE = """
local base, now, keep = ARGV[1], ARGV[2], ARGV[3]
local stream, channel = base .. 'completions', base .. 'events'
local minid = tonumber(now) - 86400000
local codes, ids, index = {}, {}, {}
for i = 4, #ARGV, 3 do
  local id, result = ARGV[i], ARGV[i + 2]
  local row = base .. 'job:' .. id
  local f = redis.call('HMGET', row, 'token', 'state', 'group', 'task', 'token',
    'failures', 'created_at', 'claimed_at', 'keep_result', 'parent', 'kids', 'parent_queue')
  redis.call('HSET', row, 'state', 'completed', 'result', result, 'finished_at', now)
  redis.call('PUBLISH', channel, '{"event":"completed","job":"' .. id .. '"}')
  redis.call('XADD', stream, 'MINID', '~', minid, '*', 'id', id, 'state', 'completed',
    'token', f[1] or '0', 'task', f[4] or '', 'result', result,
    'created_at', f[7] or '', 'claimed_at', f[8] or '', 'finished_at', now)
  redis.call('PEXPIRE', row, keep)
  codes[#codes + 1] = 1
  ids[#ids + 1] = id
  index[#index + 1] = now + keep
  index[#index + 1] = id
end
if #KEYS > 0 and #ids > 0 then
  redis.call('ZMSCORE', KEYS[1], unpack(ids))
  redis.call('ZREM', KEYS[1], unpack(ids))
  redis.call('ZADD', KEYS[2], unpack(index))
  redis.call('HINCRBY', KEYS[3], 'count', #ids)
end
return codes
"""


def _prefill(url: str, jobs: int) -> None:
    """``jobs`` no-op jobs enqueued with echomq's bulk enqueue (the adapter's bulk role)."""
    fill, _, env, cwd = cpu_per_job._commands_of("echomq", url, jobs, None)
    argv = [*fill[:3], "bulk", "--url", url, "--jobs", str(jobs)]
    subprocess.run(argv, cwd=cwd, env=env, check=True, stdout=subprocess.DEVNULL)


def _now_ms(r: redis.Redis) -> int:
    s, us = r.time()
    return int(s) * 1000 + int(us) // 1000


def _scripts(r: redis.Redis, ids: list[bytes], batch: int, worker: str) -> int:
    """claim.lua then complete_many.lua, ``batch`` jobs per call, until the claim is empty."""
    claim = claim_batch_call(QUEUE, LEASE_MS, batch, worker)
    args = claim.evalsha_args()
    done = 0
    while True:
        got = claim.read(r.execute_command(*args))
        if not got.jobs:
            return done
        call = complete_many_call(QUEUE, [(j.id, j.token, RESULT) for j in got.jobs])
        codes = call.read(r.execute_command(*call.evalsha_args()))
        done += len(codes)


def _floor_lua(r: redis.Redis, ids: list[bytes], batch: int, worker: str, sets: bool) -> int:
    claim, complete = r.register_script(FLOOR_CLAIM), r.register_script(FLOOR_COMPLETE)
    claim_keys = [KS.pending, KS.active] if sets else []
    complete_keys = [KS.active, KS.completed, KS.metrics_completed] if sets else []
    epoch = r.info("server")["run_id"]
    done = 0
    for i in range(0, len(ids), batch):
        now = _now_ms(r)
        reply = claim(keys=claim_keys, args=[KS.base, worker, now, epoch, *ids[i : i + batch]])
        triples = []
        for k in range(0, len(reply), 5):
            triples += [reply[k], reply[k + 2], RESULT]
        codes = complete(keys=complete_keys, args=[KS.base, now, DAY_MS, *triples])
        done += len(codes)
    return done


def _plain(r: redis.Redis, ids: list[bytes], batch: int, worker: str) -> int:
    """floor_lua's commands without Lua: per batch, four pipelines (the reads, then the
    writes that depend on them, for the claim and for the complete)."""
    epoch = r.info("server")["run_id"]
    channel, stream = KS.events, KS.completions
    done = 0
    for i in range(0, len(ids), batch):
        now = _now_ms(r)
        part = [x.decode() for x in ids[i : i + batch]]
        rows = [KS.base + "job:" + x for x in part]
        p = r.pipeline(transaction=False)
        for row in rows:
            p.hmget(row, CLAIM_FIELDS)
        fields = p.execute()
        p = r.pipeline(transaction=False)
        tokens = []
        for x, row, f in zip(part, rows, fields, strict=True):
            token = int(f[3] or 0) + 1
            tokens.append(token)
            p.hset(row, mapping={"token": token, "state": "active", "lease_epoch": epoch,
                                 "claimed_at": now, "worker": worker})  # fmt: skip
            p.publish(channel, f'{{"event":"active","job":"{x}","attempt":{token}}}')
        p.execute()
        p = r.pipeline(transaction=False)
        for row in rows:
            p.hmget(row, COMPLETE_FIELDS)
        fields = p.execute()
        p = r.pipeline(transaction=False)
        for x, row, f in zip(part, rows, fields, strict=True):
            p.hset(row, mapping={"state": "completed", "result": RESULT, "finished_at": now})
            p.publish(channel, f'{{"event":"completed","job":"{x}"}}')
            entry = {"id": x, "state": "completed", "token": f[0] or b"0", "task": f[3] or b"",
                     "result": RESULT, "created_at": f[6] or b"", "claimed_at": f[7] or b"",
                     "finished_at": now}  # fmt: skip
            p.xadd(stream, entry, minid=now - DAY_MS, approximate=True)
            p.pexpire(row, DAY_MS)
        done += len(p.execute()) // 4
    return done


def floor_one(r: redis.Redis, url: str, variant: str, jobs: int, batch: int) -> dict[str, Any]:
    """One variant over ``jobs`` freshly prefilled jobs: redis-server CPU per job."""
    r.flushall()
    _prefill(url, jobs)
    for name in ("claim", "complete_many"):
        if r.script_load(SCRIPTS[name].source) != SCRIPTS[name].sha:
            raise RuntimeError(f"{name}: server sha differs from echomq's")
    ids = r.zrange(KS.pending, 0, -1)
    worker = uuid.uuid4().hex[:16]
    r.config_resetstat()
    t0, s0 = time.perf_counter(), cpu_per_job.server_cpu(r)
    if variant == "scripts":
        done = _scripts(r, ids, batch, worker)
    elif variant == "plain":
        done = _plain(r, ids, batch, worker)
    else:
        done = _floor_lua(r, ids, batch, worker, sets=variant == "floor_lua_sets")
    s1, t1 = cpu_per_job.server_cpu(r), time.perf_counter()
    stats = r.info("commandstats")
    if done != jobs:
        raise RuntimeError(f"{variant}: {done} of {jobs} jobs done")
    usec = cpu_per_job._commands(stats, "usec")
    usec.pop("info", None)
    inside = sum(v for k, v in usec.items() if k not in ("evalsha", "eval"))
    return {
        "redis_us_per_job": (s1 - s0) / jobs * 1e6,
        # Redis's own accounting (commandstats usec, wall clock): the commands' time (those
        # run by a script included), and the scripts' whole time (their commands included)
        "commands_us_per_job": inside / jobs,
        "scripts_us_per_job": usec.get("evalsha", 0) / jobs,
        "wall_us_per_job": (t1 - t0) / jobs * 1e6,
        "calls_per_job": cpu_per_job.per_job_calls({}, cpu_per_job._commands(stats), jobs),
        "command_us_per_job": cpu_per_job.per_job_calls({}, usec, jobs, least=0.05),
    }


def ceiling() -> dict[str, Any]:
    async def run() -> dict[str, Any]:
        with RedisServer() as server:
            piped = await redis_benchmark(server.port, ["PING"], 1_000_000)
            single = await redis_benchmark(server.port, ["PING"], 50_000, pipeline=1, clients=1)
        return {"ping_p16_c50": piped, "ping_p1_c1": single}

    return trio.run(run)


def bound_us(worker: float, worker_main: float, redis_us: float) -> float:
    """The least time per job a drain can take on 2 cores, from CPU per job: the worker's
    main thread and redis-server each run on one core at most, and both processes
    together (a worker's helper threads included) on two."""
    return max(worker_main, redis_us, (worker + redis_us) / 2)


def _split(figs: dict[str, float]) -> tuple[float, float, float]:
    w = figs["worker_us_per_job_run"]
    return w, figs.get("worker_main_us_per_job_run", w), figs["redis_us_per_job_run"]


def arithmetic(
    drain: dict[str, dict[str, float]], floor: dict[str, dict[str, float]], ratio: float
) -> dict[str, float]:
    """What a drain at 2x BullMQ Node leaves per job, against echomq's CPU per job
    (microseconds), two ways: from the rates measured in this run (the machine's load
    included), and from both systems' CPU per job (each as if alone on the 2 cores).

    ``drain``: {system: median figures of cpu_per_job.one} for one size; ``floor``:
    {variant: median figures of floor_one}; ``ratio``: the median over repetitions of
    echomq's drain rate / BullMQ's."""
    bull, emq = drain["bullmq-node"], drain["echomq"]
    rate = bull["drain_per_s"]
    bw, bw_main, br = _split(bull)
    w, w_main, rs = _split(emq)
    b_bound, e_bound = bound_us(bw, bw_main, br), bound_us(w, w_main, rs)
    target = b_bound / 2
    lua = floor["floor_lua"]["redis_us_per_job"]
    scripts = floor["scripts"]["redis_us_per_job"]
    return {
        # the rates of this run
        "bullmq_drain_per_s": rate,
        "echomq_drain_per_s": emq["drain_per_s"],
        "ratio_per_rep_median": ratio,
        "target_wall_us_per_job": 1e6 / (2 * rate),
        # CPU per job (first completion to last) and the 2-core bound it sets
        "bullmq_node_us_per_job": bw,
        "bullmq_node_main_thread_us_per_job": bw_main,
        "bullmq_redis_us_per_job": br,
        "bullmq_bound_us_per_job": b_bound,
        "echomq_worker_us_per_job": w,
        "echomq_redis_us_per_job": rs,
        "echomq_bound_us_per_job": e_bound,
        "bound_ratio": b_bound / e_bound,
        "target_cpu_us_per_job": target,
        # the Redis floor (floor_one, ``--batch`` jobs per call, no worker)
        "redis_scripts_us_per_job": scripts,
        "redis_floor_lua_us_per_job": lua,
        "redis_floor_lua_sets_us_per_job": floor["floor_lua_sets"]["redis_us_per_job"],
        "redis_plain_us_per_job": floor["plain"]["redis_us_per_job"],
        "scripts_over_floor": scripts / lua,
        "floor_lua_share_of_target": lua / target,
        # what each process would have to shed for a 2x bound (negative: room left)
        "worker_cut_needed_us": w_main - target,
        "redis_cut_needed_us": rs - target,
        "sum_cut_needed_us": (w + rs) - 2 * target,
    }


def summarize(
    runs: dict[str, list[dict[str, Any]]], sizes: list[int]
) -> tuple[dict[str, dict[str, float]], dict[str, dict[str, float]]]:
    """The medians of every figure, and the arithmetic per drain size."""
    median = {name: cpu_per_job.median_of(xs) for name, xs in runs.items()}
    floor = {v: median[f"floor:{v}"] for v in VARIANTS}
    sums = {}
    for size in sizes:
        pairs = zip(runs[f"drain{size}:echomq"], runs[f"drain{size}:bullmq-node"], strict=True)
        ratio = statistics.median(e["drain_per_s"] / b["drain_per_s"] for e, b in pairs)
        drain = {system: median[f"drain{size}:{system}"] for system in SYSTEMS}
        sums[f"drain{size}"] = arithmetic(drain, floor, ratio)
    return median, sums


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m benchmarks floor",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--drain", type=int, action="append", help="drain sizes (10000, 100000)")
    p.add_argument("--floor-jobs", type=int, default=20_000)
    p.add_argument("--batch", type=int, default=50, help="jobs per claim / complete call")
    p.add_argument(
        "--from", dest="sources", type=Path, action="append",
        help="print runs' JSON again (several: their repetitions together; saved with --json)",
    )  # fmt: skip
    files.add_arguments(p, reps=3)
    return p


def main(argv: list[str] | None = None) -> None:
    args = parser().parse_args(argv)
    if args.sources:
        doc = merge([json.loads(f.read_text()) for f in args.sources])
        if args.json or args.publish:
            files.save("floor", doc, args)
        _print(*summarize(doc["runs"], doc["sizes"]))
        return
    meta = machine.describe("floor", argv)
    sizes = args.drain or [10_000, 100_000]
    runs: dict[str, list[dict[str, Any]]] = {"ceiling": []}
    for size in sizes:
        for system in SYSTEMS:
            runs[f"drain{size}:{system}"] = []
    for variant in VARIANTS:
        runs[f"floor:{variant}"] = []
    loads = []
    with RedisServer() as server:
        assert server.process is not None
        pid = server.process.pid
        r = redis.Redis.from_url(server.url)
        for rep in range(args.reps):
            loads.append(os.getloadavg())
            runs["ceiling"].append(ceiling())
            print(f"rep {rep} ceiling {runs['ceiling'][-1]} load {loads[-1]}", flush=True)
            for size in sizes:
                for system in SYSTEMS:
                    r.flushall()
                    r.config_resetstat()
                    got = cpu_per_job.one(server.url, pid, size, None, system)
                    runs[f"drain{size}:{system}"].append(got)
                    print(f"rep {rep} drain{size} {system}: {cpu_per_job._line(got)}", flush=True)
            for variant in VARIANTS:
                got = floor_one(r, server.url, variant, args.floor_jobs, args.batch)
                runs[f"floor:{variant}"].append(got)
                print(f"rep {rep} floor {variant}: {cpu_per_job._line(got)}", flush=True)
        r.flushall()
    loads.append(os.getloadavg())
    median, sums = summarize(runs, sizes)
    _print(median, sums)
    doc = {
        "meta": machine.finish(meta),
        "date": meta["date"],
        "command": "python -m benchmarks floor " + meta["argv"],
        "cpus": os.cpu_count(),
        "sizes": sizes,
        "floor_jobs": args.floor_jobs,
        "batch": args.batch,
        "load_average": {"per_rep": loads[:-1], "end": loads[-1]},
        "median": median,
        "arithmetic": sums,
        "runs": runs,
    }
    files.save("floor", doc, args)


def merge(docs: list[dict[str, Any]]) -> dict[str, Any]:
    """Runs of the same sizes and settings as one: their repetitions in order, each run's
    date, command and load kept; medians and arithmetic over all the repetitions."""
    first = docs[0]
    for d in docs[1:]:
        for k in ("sizes", "floor_jobs", "batch"):
            if d[k] != first[k]:
                raise ValueError(f"runs differ in {k}: {first[k]} vs {d[k]}")
    if len(docs) == 1:
        return first
    runs = {name: [r for d in docs for r in d["runs"][name]] for name in first["runs"]}
    median, sums = summarize(runs, first["sizes"])
    parts = [{k: d[k] for k in ("date", "command", "load_average")} for d in docs]
    keep: dict[str, Any] = {
        k: first[k] for k in ("cpus", "sizes", "floor_jobs", "batch") if k in first
    }
    return {**keep, "runs_merged": parts, "median": median, "arithmetic": sums, "runs": runs}


def readme(doc: dict[str, Any], source: str) -> str:
    """The README's tables, from a run's (or several merged runs') JSON."""
    runs = doc.get("runs_merged") or [doc]
    reps = len(doc["runs"]["ceiling"])
    dates = ", ".join(str(r.get("date", "?")) for r in runs)
    meta = {"cpus": doc.get("cpus"), "date": dates}
    extra = f"{len(runs)} runs, their repetitions together." if len(runs) > 1 else ""
    head = tables.conditions(meta, reps=reps, source=source, extra=extra)
    return head + "\n\n" + _markdown(doc)


def _markdown(doc: dict[str, Any]) -> str:
    median, sums = summarize(doc["runs"], doc["sizes"])
    out = [
        "| drain | system | jobs/s | worker us/job (main thread) | redis-server us/job |"
        " commands/job (scripts/job) | 2-core bound us/job (jobs/s) |",
        "|---|---|---|---|---|---|---|",
    ]
    for size in doc["sizes"]:
        for system in SYSTEMS:
            m = median[f"drain{size}:{system}"]
            w, w_main, rs = _split(m)
            b = bound_us(w, w_main, rs)
            calls = [r["calls_per_job"] for r in doc["runs"][f"drain{size}:{system}"]]
            scripts = statistics.median(c.get("evalsha", 0) + c.get("eval", 0) for c in calls)
            total = statistics.median(sum(c.values()) for c in calls)
            out.append(
                f"| {size:,} | {system} | {m['drain_per_s']:,.0f} | {w:.1f} ({w_main:.1f}) "
                f"| {rs:.1f} | {total:.1f} ({scripts:.2f}) | {b:.1f} ({1e6 / b:,.0f}) |"
            )
    out += [
        "",
        "| claim + complete, Redis only | redis-server us/job | in commands (commandstats)"
        " | in scripts (commandstats) |",
        "|---|---|---|---|",
    ]
    for v in VARIANTS:
        m = median[f"floor:{v}"]
        out.append(
            f"| {v} | {m['redis_us_per_job']:.1f} | {m['commands_us_per_job']:.1f} "
            f"| {m['scripts_us_per_job']:.1f} |"
        )
    out += ["", "| us per job | " + " | ".join(f"drain {n:,}" for n in doc["sizes"]) + " |"]
    out.append("|---|" + "---|" * len(doc["sizes"]))
    rows = [
        ("BullMQ Node jobs/s, echomq jobs/s (ratio, median of reps)", None),
        ("2x target from this run's rates: 1 / (2 x BullMQ's rate)", "target_wall_us_per_job"),
        ("BullMQ's 2-core bound (from its CPU per job)", "bullmq_bound_us_per_job"),
        ("2x target from CPU: BullMQ's bound / 2", "target_cpu_us_per_job"),
        ("echomq worker (main thread)", "echomq_worker_us_per_job"),
        ("echomq redis-server (claim.lua + complete_many.lua, in the drain)",
         "echomq_redis_us_per_job"),
        ("echomq's 2-core bound", "echomq_bound_us_per_job"),
        ("Redis floor: the per-job commands in a bare script", "redis_floor_lua_us_per_job"),
        ("Redis floor with the per-call set moves", "redis_floor_lua_sets_us_per_job"),
        ("worker cut needed for the CPU target", "worker_cut_needed_us"),
        ("redis-server cut needed for the CPU target", "redis_cut_needed_us"),
    ]  # fmt: skip
    for label, key in rows:
        cells = []
        for n in doc["sizes"]:
            a = sums[f"drain{n}"]
            if key is None:
                cells.append(
                    f"{a['bullmq_drain_per_s']:,.0f}, {a['echomq_drain_per_s']:,.0f}"
                    f" (x{a['ratio_per_rep_median']:.2f})"
                )
            else:
                cells.append(f"{a[key]:.1f}")
        out.append(f"| {label} | " + " | ".join(cells) + " |")
    return "\n".join(out)


def _print(median: dict[str, dict[str, float]], sums: dict[str, dict[str, float]]) -> None:
    for name, med in median.items():
        print(f"median {name}: {cpu_per_job._line(med)}")
    for name, a in sums.items():
        print(f"arithmetic {name}:")
        for k, v in a.items():
            print(f"  {k:40} {v:12,.2f}")


if __name__ == "__main__":
    main()
