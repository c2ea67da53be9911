"""echomq end to end, measured exactly as the peers are (``peers/peer_echomq.py`` through
:mod:`benchmarks.peers.harness`): no-op jobs/s with one and two worker processes, enqueue/s
one at a time with no worker, and enqueue -> ``handle.result()`` latency p50/p99."""

from __future__ import annotations

import argparse
from collections.abc import Callable

import echomq

from .peers.harness import record, run_adapter
from .stats import Results

__all__ = ["run_e2e", "runtime_available"]


def runtime_available() -> bool:
    """The runtime (``echomq.Queue`` / ``echomq.Worker``, DESIGN.md section 1) has landed."""
    return hasattr(echomq, "Queue") and hasattr(echomq, "Worker")


async def run_e2e(args: argparse.Namespace, *, log: Callable[[str], None]) -> Results:
    """echomq alone: the concurrent-producer run with one and two worker processes (the
    ``peers`` rotation measures every other mode, beside the peers)."""
    res = Results()
    if not runtime_available():
        res.notes.append("echomq.Queue / echomq.Worker are not importable yet: e2e skipped")
        return res
    for rep in range(args.reps):
        for workers in (1, 2):
            modes = ("produce", "latency") if workers == 1 else ("produce",)
            label = f"echomq e2e, {workers} worker process{'es' if workers > 1 else ''}"
            try:
                figs = await run_adapter(
                    "echomq", args, workers=workers, rep=rep, modes=modes, log=log
                )
            except Exception as exc:
                res.notes.append(f"{label} rep {rep + 1}: {exc}")
                log(f"{label}: FAILED {exc}")
                continue
            record(res, label, figs, rep=rep)
    return res
