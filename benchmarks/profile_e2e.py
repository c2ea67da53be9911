"""Where echomq's time goes at full load: py-spy on the worker and the producer.

And the server's side from ``INFO commandstats`` and a zero-threshold ``SLOWLOG`` (per
script sha).

    python -m benchmarks profile_e2e [--jobs 50000] [--rate 250]

A diagnostic, not a published figure. Two scenarios on one private redis-server, with
echomq's own benchmark adapter (``adapters/peer_echomq.py``, the same worker and producer
the tables measure):

- ``drain``: N jobs enqueued first (``enqueue_many``), then a fresh worker drains them;
  py-spy records the worker from its start to the last completion.
- ``e2e``: an emptied server, a fresh worker, the producer enqueuing N jobs 100 at a time
  while it runs (the ``produce`` role, after its 200-job warm-up); py-spy records both.

For each: the top frames by own time and by inclusive time (percent of the process's
non-idle samples), the server's commands (calls, usec/call, share of the server's
command time; commands run inside scripts are counted by Redis under their own names as
well), and the scripts' usec/call from the slowlog. The raw py-spy files and a JSON
summary land in ``benchmarks/results/scratch/profile_e2e-<time>/``. Needs ``py-spy`` (``pip install
py-spy`` in the venv) and root or ptrace rights. The slowlog costs the server a little;
read the shares, not the absolute times.
"""

from __future__ import annotations

import argparse
import collections
import datetime as dt
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import redis

from echomq._scripts.calls import SCRIPTS
from echomq.testing import RedisServer

from . import files, harness

PEERS = harness.HERE  # the adapters' folder


def _cmd(role: str, url: str, jobs: int) -> list[str]:
    code = "import _common, peer_echomq as a; _common.main(a)"
    return [sys.executable, "-c", code, role, "--url", url, "--jobs", str(jobs)]


def _env(url: str) -> dict[str, str]:
    env = dict(os.environ, BENCH_URL=url, PYTHONUNBUFFERED="1")
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(PEERS), env.get("PYTHONPATH", "")) if p)
    return env


def _spy(pid: int, out: Path, rate: int) -> subprocess.Popen[bytes]:
    spy = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    line = [spy, "record", "--pid", str(pid), "--rate", str(rate), "--format", "raw"]
    line += ["--function", "--nonblocking", "-o", str(out)]
    return subprocess.Popen(line, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def _stop_spy(spy: subprocess.Popen[bytes]) -> None:
    spy.send_signal(signal.SIGINT)  # py-spy writes its file on Ctrl-C
    spy.wait(timeout=60)


def _reset(r: redis.Redis) -> None:
    r.slowlog_reset()
    r.config_resetstat()


def _server_side(r: redis.Redis) -> dict[str, Any]:
    stats = r.info("commandstats")
    total = sum(v["usec"] for v in stats.values())
    commands = {
        k.removeprefix("cmdstat_"): {
            "calls": v["calls"],
            "usec_per_call": v["usec_per_call"],
            "share": v["usec"] / total if total else 0.0,
        }
        for k, v in sorted(stats.items(), key=lambda kv: -kv[1]["usec"])
    }
    by_sha = {s.sha: name for name, s in SCRIPTS.items()}
    per: dict[str, list[int]] = collections.defaultdict(list)
    for entry in r.slowlog_get(-1):
        args = entry["command"].split()
        if args and args[0].upper() == b"EVALSHA":
            per[by_sha.get(args[1].decode(), args[1].decode())].append(entry["duration"])
        elif args and args[0].upper() not in (b"SLOWLOG", b"CONFIG", b"INFO", b"FLUSHALL"):
            per[args[0].decode().upper()].append(entry["duration"])
    scripts = {
        name: {"calls": len(d), "usec_per_call": sum(d) / len(d), "usec": sum(d)}
        for name, d in sorted(per.items(), key=lambda kv: -sum(kv[1]))
    }
    return {"commandstats": commands, "slowlog": scripts}


def fold(path: Path) -> dict[str, Any]:
    """Own-time and inclusive shares of a py-spy raw (collapsed) file; samples taken while
    the process was still importing (its start-up) are left out."""
    own: collections.Counter[str] = collections.Counter()
    incl: collections.Counter[str] = collections.Counter()
    total = 0
    for line in path.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        n = int(count)
        frames = [f for f in stack.split(";") if not f.startswith("process ")]
        if not frames or any(f.startswith("_find_and_load") for f in frames):
            continue
        total += n
        own[_short(frames[-1])] += n
        for f in {_short(f) for f in frames}:
            incl[f] += n
    return {
        "samples": total,
        "own": [(f, n / total) for f, n in own.most_common(25)],
        "inclusive": [(f, n / total) for f, n in incl.most_common(45)],
    }


def _short(frame: str) -> str:
    """``func (path/to/file.py:12)`` -> ``func (file.py)``, site-packages paths cut."""
    name, _, where = frame.partition(" (")
    file = where.rstrip(")").rsplit(":", 1)[0]
    for cut in ("site-packages/", "/src/", "lib/python3.11/"):
        if cut in file:
            file = file.split(cut, 1)[1]
    return f"{name} ({file})"


def _print(title: str, prof: dict[str, Any]) -> None:
    print(f"\n## {title} ({prof['samples']} samples)")
    print("own time:")
    for f, share in prof["own"][:20]:
        print(f"  {share:6.1%}  {f}")
    print("inclusive:")
    for f, share in prof["inclusive"][:40]:
        print(f"  {share:6.1%}  {f}")


def _print_server(title: str, side: dict[str, Any]) -> None:
    print(f"\n## {title}: redis-server")
    for name, c in list(side["commandstats"].items())[:14]:
        print(
            f"  {name:24s} calls {c['calls']:>9,}  {c['usec_per_call']:7.2f} us  {c['share']:6.1%}"
        )
    print("  scripts (slowlog, threshold 0):")
    for name, c in list(side["slowlog"].items())[:10]:
        print(f"  {name:24s} calls {c['calls']:>9,}  {c['usec_per_call']:7.2f} us/call")


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m benchmarks profile_e2e",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--jobs", type=int, default=50_000)
    p.add_argument("--rate", type=int, default=250, help="py-spy samples per second")
    p.add_argument("--fold", type=Path, help="only summarise the py-spy files of this folder")
    return p


def main(argv: list[str] | None = None) -> None:
    args = parser().parse_args(argv)
    if args.fold:
        for name in ("drain-worker", "e2e-worker", "e2e-producer"):
            _print(name, fold(args.fold / f"{name}.txt"))
        return
    out = files.SCRATCH / f"profile_e2e-{dt.datetime.now():%Y%m%d-%H%M%S}"
    out.mkdir(parents=True)
    summary: dict[str, Any] = {"jobs": args.jobs, "load_at_start": os.getloadavg()}
    with RedisServer() as server:
        r = redis.Redis.from_url(server.url)
        r.config_set("slowlog-log-slower-than", 0)
        r.config_set("slowlog-max-len", 30 * args.jobs)  # script-internal commands are logged too
        env, url = _env(server.url), server.url

        # -- drain: prefill, then a fresh worker ------------------------------------------
        drain = subprocess.Popen(_cmd("drain", url, args.jobs), cwd=PEERS, env=env,
                                 stdout=subprocess.PIPE)  # fmt: skip
        assert drain.stdout is not None
        print("prefill:", drain.stdout.readline().decode().strip(), flush=True)
        _reset(r)
        worker = subprocess.Popen(_cmd("worker", url, 0), cwd=PEERS, env=env)
        spy = _spy(worker.pid, out / "drain-worker.txt", args.rate)
        print("drain:", drain.communicate()[0].decode().strip(), flush=True)
        _stop_spy(spy)
        summary["drain_server"] = _server_side(r)

        worker.send_signal(signal.SIGTERM)
        worker.wait(timeout=15)

        # -- e2e: a fresh queue and worker, the producer enqueuing while it runs ----------
        # (the adapter's "done" reads the queue's completed count: start from an empty one)
        r.flushall()
        _reset(r)
        worker = subprocess.Popen(_cmd("worker", url, 0), cwd=PEERS, env=env)
        wspy = _spy(worker.pid, out / "e2e-worker.txt", args.rate)
        time.sleep(0.5)
        binary = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
        line = [binary, "record", "--rate", str(args.rate), "--format", "raw", "--function"]
        line += ["--nonblocking", "-o", str(out / "e2e-producer.txt"), "--"]
        done = subprocess.run(line + _cmd("produce", url, args.jobs), cwd=PEERS, env=env,
                              capture_output=True, check=True)  # fmt: skip
        print("e2e:", done.stdout.decode().strip().splitlines()[-1], flush=True)
        _stop_spy(wspy)
        summary["e2e_server"] = _server_side(r)
        worker.send_signal(signal.SIGTERM)
        worker.wait(timeout=15)

    for name in ("drain-worker", "e2e-worker", "e2e-producer"):
        summary[name] = fold(out / f"{name}.txt")
        _print(name, summary[name])
    _print_server("drain", summary["drain_server"])
    _print_server("e2e", summary["e2e_server"])
    summary["load_at_end"] = os.getloadavg()
    (out / "summary.json").write_text(json.dumps(summary, indent=1))
    print(f"\nsaved {out}")


if __name__ == "__main__":
    main()
