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
    res = Results()
    if not runtime_available():
        res.notes.append("echomq.Queue / echomq.Worker are not importable yet: e2e skipped")
        return res
    for rep in range(args.reps):
        for workers in (1, 2):
            try:
                figs = await run_adapter("echomq", args, workers=workers, rep=rep, log=log)
            except Exception as exc:
                res.notes.append(f"echomq x{workers} rep {rep + 1}: {exc}")
                log(f"echomq x{workers}: FAILED {exc}")
                continue
            record(res, "echomq", workers, figs, None)
    return res
