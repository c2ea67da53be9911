"""What every results file records about the run: the machine, its load, the code measured.

A shared 2-core machine moves absolute figures by 10-30 % between runs, so every file keeps
the load average at the start and at the end beside the figures; the ratios taken within
one repetition are the figures to compare.
"""

from __future__ import annotations

import datetime as dt
import os
import platform
import subprocess
import sys
from pathlib import Path
from typing import Any

import echomq

__all__ = ["describe", "finish", "load_average", "log"]


def log(message: str) -> None:
    """A progress line on stderr (stdout carries the tables)."""
    print(f"[{dt.datetime.now():%H:%M:%S}] {message}", file=sys.stderr, flush=True)


def load_average() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def describe(benchmark: str, argv: list[str] | None = None) -> dict[str, Any]:
    """The run's facts, taken at its start."""
    redis = subprocess.run(["redis-server", "--version"], capture_output=True, text=True)
    src = Path(echomq.__file__).parent
    return {
        "benchmark": benchmark,
        "argv": " ".join(sys.argv[1:] if argv is None else argv),
        "date": dt.datetime.now().isoformat(timespec="seconds"),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cpus": str(os.cpu_count()),
        "load_average_at_start": load_average(),
        "redis": redis.stdout.strip(),
        "echomq": echomq.__version__,
        "echomq_source": str(src),
        "echomq_commit": _commit(src),
        "echomq_src_commit": _src_commit(src),
    }


def finish(meta: dict[str, Any]) -> dict[str, Any]:
    """``meta`` with the load average at the end of the run."""
    meta["load_average_at_end"] = load_average()
    return meta


def _git(where: Path, *args: str) -> str:
    done = subprocess.run(["git", *args], cwd=where, capture_output=True, text=True, check=True)
    return done.stdout.strip()


def _src_commit(where: Path) -> str:
    """The last commit that changed echomq's source (stable across rebases of other files)."""
    try:
        return _git(where, "log", "-1", "--format=%h", "--", ".")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def _commit(where: Path) -> str:
    """The commit of the echomq measured (``+dirty`` if its tree has edits; a snapshot made by
    :mod:`benchmarks.turns` or snapshot.sh names its own)."""
    stamp = where.parent.parent / "COMMIT"
    if stamp.exists():
        return stamp.read_text().strip() + " (snapshot)"
    try:
        head = _git(where, "rev-parse", "--short", "HEAD")
        dirty = _git(where, "status", "--porcelain", "--", ".")
    except (OSError, subprocess.CalledProcessError):
        return "unknown (not a git checkout)"
    return head + ("+dirty" if dirty else "")
