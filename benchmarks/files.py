"""Where results go, and the one writer every benchmark saves through.

A run is an experiment unless it says otherwise: it lands in ``benchmarks/results/scratch/``
(ignored by git) as ``<benchmark>-<time>.json``. ``--publish`` writes the benchmark's one
published file instead, ``benchmarks/results/published/<benchmark>.json``, the file
benchmarks/README.md's tables are generated from (``python -m benchmarks report --readme``).
``--json PATH`` names any other place.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
from pathlib import Path
from typing import Any

from .machine import log

__all__ = [
    "LOGS",
    "PUBLISHED",
    "SCRATCH",
    "add_arguments",
    "load",
    "published",
    "save",
    "target",
    "write",
]

RESULTS = Path(__file__).resolve().parent / "results"
PUBLISHED = RESULTS / "published"
SCRATCH = RESULTS / "scratch"
LOGS = SCRATCH / "logs"  # worker processes' output


def add_arguments(p: argparse.ArgumentParser, *, reps: int | None = None) -> None:
    """``--json`` and ``--publish`` (and ``--reps`` with its default, when given)."""
    if reps is not None:
        p.add_argument("--reps", type=int, default=reps, help=f"repetitions (default {reps})")
    where = p.add_mutually_exclusive_group()
    where.add_argument("--json", type=Path, help="save the results here (default: scratch)")
    where.add_argument(
        "--publish",
        action="store_true",
        help="save as benchmarks/results/published/<benchmark>.json (what the README shows)",
    )


def published(benchmark: str) -> Path:
    return PUBLISHED / f"{benchmark}.json"


def target(benchmark: str, args: argparse.Namespace) -> Path:
    """Where ``args`` (``--json`` / ``--publish``) says the results go."""
    if getattr(args, "json", None) is not None:
        path: Path = args.json
        return path
    if getattr(args, "publish", False):
        return published(benchmark)
    return SCRATCH / f"{benchmark}-{dt.datetime.now():%Y%m%d-%H%M%S}.json"


def write(path: Path, doc: dict[str, Any]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc, indent=1) + "\n")
    log(f"saved {path}")
    return path


def save(benchmark: str, doc: dict[str, Any], args: argparse.Namespace) -> Path:
    """Write ``doc`` where ``args`` says; answer the path."""
    return write(target(benchmark, args), doc)


def load(path: Path) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(path.read_text())
    return doc
