"""Where an I/O-bound job's worker time goes: py-spy and trio's instrumentation on the worker.

    python -m benchmarks profile_io [--jobs 100000] [--sleep-ms 10] [--concurrency 1000]
        [--rate 250] [--what spy --what trio] [--fold DIR]

A diagnostic, not a published figure. The scenario of the peers benchmark's I/O-bound
drain, with echomq's own benchmark adapter (``adapters/peer_echomq.py``): N jobs enqueued
first, then a fresh worker of ``--concurrency`` drains them, each job awaiting
``trio.sleep(--sleep-ms)``. Both measurements cover the drain's window only: from the
adapter's poll that saw the first completion to the one that saw all N.

- ``spy``: ``py-spy record`` (Python frames only, no ``--native``; ``--nonblocking``)
  attached to the worker at the first completion, stopped at the last. Each sample is put
  in one group (:data:`GROUPS`) by its deepest frame that a group claims, so the shares
  add up to 100 % of the worker's non-idle samples; with the worker's CPU per job (from
  /proc over the same window) a share is also µs per job. The top frames by own time and
  by inclusive time follow.
- ``floor``: what trio alone costs for the same waits, no queue at all: ``--concurrency``
  tasks that each await ``trio.sleep`` in a loop (``loop``); the same loop with each sleep
  run the way the slot pool runs a job (a fresh context copy, ``pool._in_context``'s
  trampoline); and a task spawned per job under a semaphore of ``--concurrency`` (``task
  per job``); CPU per sleep, and the part of it inside task steps (the rest is the run
  loop's: expiring the deadlines, delivering the cancels, rescheduling).
- ``trio``: a worker started with a trio ``Instrument`` that counts, per kind of task
  (a slot task running jobs, the completions batch, the claim loop, the lease keeper, the
  connection's reader and writer, ...), the steps run, the time inside them and the times
  it was scheduled; and the scheduler's waits for I/O. Signals at the first and last
  completion take two snapshots; their difference over the jobs done between them is per
  job. Step times are the thread's CPU time (``time.thread_time``); the run loop's own
  work is the process's CPU outside the steps. The instrument's own hooks cost time: read
  the counts exactly, the times as shares.

Both also read the server's ``INFO stats`` and ``INFO commandstats`` at the two marks:
the worker's writes as the server reads them, the replies it wrote, the commands and
script calls, per job.

The raw py-spy file and a JSON summary land in ``benchmarks/results/scratch/profile_io-<time>/``.
Needs ``py-spy`` (``pip install py-spy`` in the venv) and ptrace rights.
"""

from __future__ import annotations

import argparse
import collections
import contextvars
import datetime as dt
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import redis
import trio

from echomq.testing import RedisServer

from . import files, harness

ROOT = Path(__file__).resolve().parent.parent
STATS = ("total_reads_processed", "total_writes_processed", "total_commands_processed")
ADAPTER = "import _common, peer_echomq as a; "

# (group, file pattern, function pattern): a sample belongs to the group of its deepest
# frame that matches one (so the sleep's timers count as the sleep's, not the job's)
GROUPS: tuple[tuple[str, str, str], ...] = (
    ("job body (the handler's own code)", r"peer_echomq\.py", r"noop"),
    ("sleep: trio.sleep, its cancel scope and deadline", r"trio/_timeouts\.py", r"."),
    (
        "sleep: trio.sleep, its cancel scope and deadline",
        r"trio/_core/_run\.py",
        r"^(CancelScope|_might_change|Deadlines|cancel|_close|__exit__|__enter__|"
        r"_attempt_delivery|recalculate|_cancel)",
    ),
    ("sleep: trio.sleep, its cancel scope and deadline", r"trio/_core/_traps\.py", r"."),
    ("sleep: trio.sleep, its cancel scope and deadline", r"trio/_core/_exceptions\.py", r"."),
    (
        "slot pool: hand-off when a job waits (_off_duty/_wake, parking)",
        r"_worker/pool\.py",
        r"^(_off_duty|_wake|start|abort|_host)",
    ),
    (
        "slot pool: the slot loop and per-job context (_slot, _in_context)",
        r"_worker/pool\.py",
        r"^(_slot|_in_context)",
    ),
    (
        "slot pool: the slot scope checks (SlotScope)",
        r"_worker/pool\.py",
        r"^(enter|leave|clean|end|limit|cancel|_repair)",
    ),
    ("runner (run.py: plan, decode, bind, encode)", r"_worker/run\.py", r"."),
    ("runner (run.py: plan, decode, bind, encode)", r"_worker/(context|outcome)\.py", r"."),
    ("runner (run.py: plan, decode, bind, encode)", r"_model/", r"."),
    (
        "settling: completions batching (settle.py, tally, room)",
        r"_worker/(settle|tally|room)\.py",
        r".",
    ),
    ("settling: completions batching (settle.py, tally, room)", r"_worker/cancellation\.py", r"."),
    ("settling: completions batching (settle.py, tally, room)", r"jobs/lifecycle\.py", r"complete"),
    (
        "claim loop (claims.py, the claim's reply decoded into Claimed jobs)",
        r"_worker/claims\.py",
        r".",
    ),
    (
        "claim loop (claims.py, the claim's reply decoded into Claimed jobs)",
        r"jobs/lifecycle\.py|echomq\._model\.job\.Claimed",
        r"claim|Claimed|__init__",
    ),
    (
        "claim loop (claims.py, the claim's reply decoded into Claimed jobs)",
        r"jobs/(claim|wake)",
        r".",
    ),
    ("lease keeper (lease.py, extend_locks)", r"_worker/lease\.py", r"."),
    ("Lua call (the verbs' argument building, script call)", r"(_scripts|jobs)/", r"."),
    ("wire: encode, write, read, decode (_wire)", r"_wire/", r"."),
    ("wire: encode, write, read, decode (_wire)", r"trio/_(socket|highlevel_socket)", r"."),
)
SCHEDULER = "trio's scheduler (run loop, I/O wait, rescheduling; no task's own frame)"


def group_of(frames: list[tuple[str, str]]) -> str:
    """The group of a sample (frames from the root, ``(function, file)`` each)."""
    for func, file in reversed(frames):
        for name, file_re, func_re in GROUPS:
            if re.search(file_re, file) and re.search(func_re, func):
                return name
    return SCHEDULER


def _frame(text: str) -> tuple[str, str, str]:
    """``func (path/file.py:12)`` -> (func, path, line)."""
    func, _, where = text.partition(" (")
    where = where.rstrip(")")
    path, _, line = where.rpartition(":")
    return func, (path or where), line


def _short(func: str, path: str, line: str = "") -> str:
    for cut in ("site-packages/", "/src/", "lib/python3.11/", "/adapters/"):
        if cut in path:
            path = path.split(cut, 1)[1]
    return f"{func} ({path}{':' + line if line else ''})"


def fold(path: Path) -> dict[str, Any]:
    """Groups, own-time and inclusive shares of a py-spy raw file (lines included)."""
    groups: collections.Counter[str] = collections.Counter()
    own: collections.Counter[str] = collections.Counter()
    own_lines: collections.Counter[str] = collections.Counter()
    incl: collections.Counter[str] = collections.Counter()
    total = 0
    for text in path.read_text().splitlines():
        stack, _, count = text.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        n = int(count)
        raw = [_frame(f) for f in stack.split(";") if not f.startswith(("process ", "thread "))]
        if not raw or any(f[0].startswith("_find_and_load") for f in raw):
            continue
        total += n
        frames = [(f, p) for f, p, _ in raw]
        groups[group_of(frames)] += n
        own[_short(*frames[-1])] += n
        own_lines[_short(*raw[-1])] += n
        for f in {_short(*f) for f in frames}:
            incl[f] += n
    share = (lambda c, k: [(f, x / total) for f, x in c.most_common(k)]) if total else None
    if share is None:
        return {"samples": 0}
    return {
        "samples": total,
        "groups": share(groups, 50),
        "own": share(own, 30),
        "own_lines": share(own_lines, 30),
        "inclusive": share(incl, 50),
    }


# -- the instrumented worker (runs in its own process) -------------------------------------


def _kind(task: Any) -> str:
    name = str(task.name)
    if name.startswith("job "):
        return "slot task (running jobs)"
    return name.rsplit(".", 2)[-2] + "." + name.rsplit(".", 1)[-1] if "." in name else name


class Counting(trio.abc.Instrument):
    """Steps, their thread CPU time, schedulings and spawns per kind of task; I/O waits."""

    def __init__(self) -> None:
        self.steps: collections.Counter[str] = collections.Counter()
        self.seconds: collections.Counter[str] = collections.Counter()
        self.scheduled: collections.Counter[str] = collections.Counter()
        self.spawned: collections.Counter[str] = collections.Counter()
        self.io_waits = 0
        self.io_wait_s = 0.0
        self._t = 0.0
        self._io = 0.0

    def before_task_step(self, task: Any) -> None:
        self._t = time.thread_time()

    def after_task_step(self, task: Any) -> None:
        k = _kind(task)
        self.steps[k] += 1
        self.seconds[k] += time.thread_time() - self._t

    def task_scheduled(self, task: Any) -> None:
        self.scheduled[_kind(task)] += 1

    def task_spawned(self, task: Any) -> None:
        self.spawned[_kind(task)] += 1

    def before_io_wait(self, timeout: float) -> None:
        self._io = time.perf_counter()

    def after_io_wait(self, timeout: float) -> None:
        self.io_waits += 1
        self.io_wait_s += time.perf_counter() - self._io

    def snapshot(self) -> dict[str, Any]:
        return {
            "t": time.perf_counter(),
            "cpu": time.process_time(),
            "steps": dict(self.steps),
            "seconds": dict(self.seconds),
            "scheduled": dict(self.scheduled),
            "spawned": dict(self.spawned),
            "io_waits": self.io_waits,
            "io_wait_s": self.io_wait_s,
        }


def serve_instrumented(url: str, sleep: float, concurrency: int, out: str) -> None:
    """The adapter's worker, run with an instrument; SIGUSR1 and SIGUSR2 each take a
    snapshot of its counters, SIGUSR2 also writes them to ``out`` (JSON)."""
    import peer_echomq  # type: ignore[import-not-found]  # (the adapters' folder is on the path)

    import echomq

    peer_echomq.SLEEP = sleep
    peer_echomq.queue.url = url

    inst = Counting()
    snaps: list[dict[str, Any]] = []

    def take(signum: int, _: Any) -> None:
        snaps.append(inst.snapshot())
        if signum == signal.SIGUSR2:
            Path(out).write_text(json.dumps(snaps))

    signal.signal(signal.SIGUSR1, take)
    signal.signal(signal.SIGUSR2, take)
    w = echomq.Worker(peer_echomq.queue, concurrency=concurrency)  # type: ignore[attr-defined]
    print("ready", flush=True)
    trio.run(w.serve, instruments=[inst])


def per_job(snaps: list[dict[str, Any]], jobs: int) -> dict[str, Any]:
    """The two snapshots' difference, per job."""
    a, b = snaps[0], snaps[-1]
    wall, cpu = b["t"] - a["t"], b["cpu"] - a["cpu"]
    steps_s = sum(b["seconds"].values()) - sum(a["seconds"].values())
    io = b["io_wait_s"] - a["io_wait_s"]
    kinds = sorted(b["steps"], key=lambda k: -(b["seconds"][k] - a["seconds"].get(k, 0.0)))
    rows = []
    for k in kinds:
        d = {f: b[f].get(k, 0) - a[f].get(k, 0) for f in ("steps", "seconds", "scheduled")}
        spawned = b["spawned"].get(k, 0) - a["spawned"].get(k, 0)
        if not d["steps"]:
            continue
        rows.append(
            {
                "kind": k,
                "steps_per_job": d["steps"] / jobs,
                "scheduled_per_job": d["scheduled"] / jobs,
                "spawned_per_job": spawned / jobs,
                "us_per_job": d["seconds"] / jobs * 1e6,
                "us_per_step": d["seconds"] / d["steps"] * 1e6,
                "share_of_steps": d["seconds"] / steps_s if steps_s else 0.0,
            }
        )
    return {
        "jobs": jobs,
        "wall_s": wall,
        "cpu_us_per_job": cpu / jobs * 1e6,
        "in_steps_us_per_job": steps_s / jobs * 1e6,
        # the run loop's own work: CPU outside the steps (waiting for I/O costs none)
        "scheduler_us_per_job": (cpu - steps_s) / jobs * 1e6,
        "io_waits_per_job": (b["io_waits"] - a["io_waits"]) / jobs,
        "io_wait_us_per_job": io / jobs * 1e6,
        "kinds": rows,
    }


# -- the controller -------------------------------------------------------------------------


def _env(url: str) -> dict[str, str]:
    env = dict(os.environ, BENCH_URL=url, PYTHONUNBUFFERED="1")
    path = (str(harness.HERE), str(ROOT), env.get("PYTHONPATH", ""))
    env["PYTHONPATH"] = os.pathsep.join(p for p in path if p)
    return env


def _server_stats(r: redis.Redis) -> dict[str, float]:
    """The server's counters: reads and writes it processed, commands, calls per command."""
    info = r.info("stats")
    out = {k: float(info[k]) for k in STATS if k in info}
    for name, c in r.info("commandstats").items():
        out[name.removeprefix("cmdstat_")] = float(c["calls"])
    return out


def _drain(url: str, args: argparse.Namespace, worker: list[str], on: Any) -> dict[str, Any]:
    """Prefill, start ``worker`` on the prefilled line, call ``on(event, proc)`` at
    ``started``, ``first`` and ``last``; answer the drain's figures and the marks."""
    env = _env(url)
    fill = [sys.executable, "-c", ADAPTER + "_common.main(a)", "drain", "--url", url]
    fill += ["--jobs", str(args.jobs)]
    drain = subprocess.Popen(fill, cwd=harness.HERE, env=env, stdout=subprocess.PIPE)
    assert drain.stdout is not None
    proc: subprocess.Popen[bytes] | None = None
    marks: dict[str, tuple[int, float]] = {}
    stats: dict[str, dict[str, float]] = {}
    r = redis.Redis.from_url(url)
    figs: dict[str, Any] = {}
    try:
        for line in drain.stdout:
            msg = json.loads(line)
            if "prefilled" in msg:
                proc = subprocess.Popen(worker, cwd=harness.HERE, env=env, stdout=subprocess.PIPE)
                assert proc.stdout is not None
                on("started", proc)
            elif "first" in msg or "last" in msg:
                key = "first" if "first" in msg else "last"
                assert proc is not None
                marks[key] = (int(msg[key]), harness.process_cpu(proc.pid))
                stats[key] = _server_stats(r)
                on(key, proc)
            else:
                figs = msg
        drain.wait(timeout=60)
    finally:
        if proc is not None:
            proc.terminate()
            proc.wait(timeout=30)
        if drain.poll() is None:
            drain.kill()
            drain.wait()
    (c0, w0), (c1, w1) = marks["first"], marks["last"]
    figs["window_jobs"] = c1 - c0
    figs["worker_us_per_job"] = (w1 - w0) / (c1 - c0) * 1e6
    figs["server_per_job"] = {
        k: round((v - stats["first"].get(k, 0.0)) / (c1 - c0), 4)
        for k, v in stats["last"].items()
        if v != stats["first"].get(k, 0.0)
    }
    return figs


def spy(out: Path, args: argparse.Namespace) -> dict[str, Any]:
    binary = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    worker = [sys.executable, "-c", ADAPTER + "_common.main(a)", "worker"]
    worker += ["--concurrency", str(args.concurrency), "--sleep", repr(args.sleep_ms / 1000)]
    raw = out / "spy-worker.txt"
    held: list[subprocess.Popen[bytes]] = []

    def on(event: str, proc: subprocess.Popen[bytes]) -> None:
        if event == "first":
            line = [binary, "record", "--pid", str(proc.pid), "--rate", str(args.rate)]
            line += ["--format", "raw", "--nonblocking", "-o", str(raw)]
            held.append(subprocess.Popen(line, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE))
        elif event == "last" and held:
            held[0].send_signal(signal.SIGINT)  # py-spy writes its file on Ctrl-C
            held[0].wait(timeout=60)

    with RedisServer() as server:
        figs = _drain(server.url, args, [*worker, "--url", server.url], on)
    return {"drain": figs, **fold(raw)}


def instrumented(out: Path, args: argparse.Namespace) -> dict[str, Any]:
    dump = out / "trio-snapshots.json"
    code = (
        "import sys; from benchmarks.profile_io import serve_instrumented; "
        "serve_instrumented(sys.argv[1], float(sys.argv[2]), int(sys.argv[3]), sys.argv[4])"
    )

    def on(event: str, proc: subprocess.Popen[bytes]) -> None:
        if event == "started":
            assert proc.stdout is not None
            proc.stdout.readline()  # ready: imports done, serving next
        elif event == "first":
            proc.send_signal(signal.SIGUSR1)
        elif event == "last":
            proc.send_signal(signal.SIGUSR2)
            deadline = time.monotonic() + 10
            while not dump.exists() and time.monotonic() < deadline:
                time.sleep(0.01)

    with RedisServer() as server:
        worker = [sys.executable, "-c", code, server.url, repr(args.sleep_ms / 1000)]
        worker += [str(args.concurrency), str(dump)]
        figs = _drain(server.url, args, worker, on)
    snaps = json.loads(dump.read_text())
    return {"drain": figs, **per_job(snaps, figs["window_jobs"])}


def floor_child(jobs: int, concurrency: int, sleep: float) -> None:
    """Print the CPU per ``trio.sleep`` of the three shapes (see the module's ``floor``), and
    for each the thread CPU inside task steps per sleep (the rest is the run loop's)."""

    async def loop() -> None:
        async def one(k: int) -> None:
            for _ in range(k):
                await trio.sleep(sleep)

        async with trio.open_nursery() as nursery:
            for _ in range(concurrency):
                nursery.start_soon(one, jobs // concurrency)

    async def per_job() -> None:
        limit = trio.Semaphore(concurrency)

        async def one() -> None:
            try:
                await trio.sleep(sleep)
            finally:
                limit.release()

        async with trio.open_nursery() as nursery:
            for _ in range(jobs):
                await limit.acquire()
                nursery.start_soon(one)

    from echomq._worker.pool import _in_context

    class Duty:  # what _in_context reads of its pool
        _on_duty = 0

        def _off_duty(self) -> None:
            self._on_duty -= 1

    async def sleeper() -> None:
        await trio.sleep(sleep)

    async def slot_shape() -> None:
        async def one(k: int) -> None:
            base, duty = contextvars.copy_context(), Duty()
            for _ in range(k):
                await _in_context(base.copy(), sleeper(), duty)  # type: ignore[arg-type]

        async with trio.open_nursery() as nursery:
            for _ in range(concurrency):
                nursery.start_soon(one, jobs // concurrency)

    out = {}
    shapes = (("loop", loop), ("loop, the slot pool's context copy and trampoline", slot_shape),
              ("task per job", per_job))  # fmt: skip
    n = jobs // concurrency * concurrency
    for name, fn in shapes:
        inst = Counting()
        t0 = time.process_time()
        trio.run(fn, instruments=[inst])
        out[name] = (time.process_time() - t0) / n * 1e6
        out[f"{name}: in task steps"] = sum(inst.seconds.values()) / n * 1e6
    print(json.dumps(out))


def floor(args: argparse.Namespace) -> dict[str, float]:
    code = (
        "import sys; from benchmarks.profile_io import floor_child; "
        "floor_child(int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3]))"
    )
    line = [sys.executable, "-c", code, str(args.jobs), str(args.concurrency)]
    done = subprocess.run(
        [*line, repr(args.sleep_ms / 1000)],
        cwd=ROOT,
        env=_env(""),
        capture_output=True,
        text=True,
        check=True,
    )
    found: dict[str, float] = json.loads(done.stdout.strip().splitlines()[-1])
    return found


def _print_spy(prof: dict[str, Any]) -> None:
    d = prof["drain"]
    us = d["worker_us_per_job"]
    print(f"\n## py-spy: {prof['samples']} samples; drain {d['drain_per_s']:,.0f} jobs/s, "
          f"worker {us:.1f} µs per job (/proc)")  # fmt: skip
    print(f"server, per job: {d.get('server_per_job', '')}")
    print("groups (deepest frame a group claims):")
    for name, share in prof["groups"]:
        print(f"  {share:6.1%}  {share * us:5.1f} µs  {name}")
    for title, key in (("own time", "own"), ("own time, by line", "own_lines")):
        print(f"{title}:")
        for f, share in prof[key][:25]:
            print(f"  {share:6.1%}  {f}")
    print("inclusive:")
    for f, share in prof["inclusive"][:40]:
        print(f"  {share:6.1%}  {f}")


def _print_trio(t: dict[str, Any]) -> None:
    d = t["drain"]
    print(f"\n## trio instrument: drain {d['drain_per_s']:,.0f} jobs/s (instrumented), "
          f"process CPU {t['cpu_us_per_job']:.1f} µs per job; in task steps "
          f"{t['in_steps_us_per_job']:.1f}, run loop {t['scheduler_us_per_job']:.1f} µs per job; "
          f"I/O wait (wall) {t['io_wait_us_per_job']:.1f} µs per job "
          f"({t['io_waits_per_job']:.3f} waits per job)")  # fmt: skip
    print(f"  server, per job: {d['server_per_job']}")
    print(f"  {'task kind':56s} {'steps/job':>9s} {'sched/job':>9s} {'spawn/job':>9s} "
          f"{'µs/job':>7s} {'µs/step':>7s} {'share':>6s}")  # fmt: skip
    for r in t["kinds"][:16]:
        print(f"  {r['kind'][:56]:56s} {r['steps_per_job']:9.3f} {r['scheduled_per_job']:9.3f} "
              f"{r['spawned_per_job']:9.3f} {r['us_per_job']:7.2f} {r['us_per_step']:7.2f} "
              f"{r['share_of_steps']:6.1%}")  # fmt: skip


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m benchmarks profile_io",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--jobs", type=int, default=100_000, help="the backlog (default 100,000)")
    p.add_argument("--sleep-ms", type=float, default=10.0, help="each job's sleep (default 10)")
    p.add_argument("--concurrency", type=int, default=1000, help="worker concurrency")
    p.add_argument("--rate", type=int, default=250, help="py-spy samples per second")
    p.add_argument(
        "--what",
        action="append",
        choices=["spy", "trio", "floor"],
        help="which measurement (repeatable; default all three, one drain each)",
    )
    p.add_argument("--fold", type=Path, help="only summarise this folder's py-spy file")
    return p


def main(argv: list[str] | None = None) -> None:
    args = parser().parse_args(argv)
    if args.fold:
        prof = fold(args.fold / "spy-worker.txt")
        summary = json.loads((args.fold / "summary.json").read_text())
        _print_spy({**prof, "drain": summary["spy"]["drain"]})
        return
    out = files.SCRATCH / f"profile_io-{dt.datetime.now():%Y%m%d-%H%M%S}"
    out.mkdir(parents=True)
    summary: dict[str, Any] = {
        "args": vars(args) | {"fold": None},
        "load_at_start": os.getloadavg(),
    }
    for what in args.what or ["spy", "trio", "floor"]:
        if what == "floor":
            summary["floor"] = floor(args)
            for name, us in summary["floor"].items():
                print(f"\n## trio alone, {name}: {us:.1f} µs CPU per sleep (instrumented)")
        elif what == "spy":
            summary["spy"] = spy(out, args)
            _print_spy(summary["spy"])
        else:
            summary["trio"] = instrumented(out, args)
            _print_trio(summary["trio"])
    summary["load_at_end"] = os.getloadavg()
    (out / "summary.json").write_text(json.dumps(summary, indent=1, default=str))
    print(f"\nsaved {out}")


if __name__ == "__main__":
    main()
