"""The rotation "in turns": variants measured one after another inside every repetition.

On a shared machine the load moves between minutes, so two trees (or systems, or settings)
are compared within one repetition, each on a fresh server, with the order rotating so
that none always goes first. :func:`snapshot` exports a commit's ``src/`` with ``git
archive`` so that an older echomq can take its turn beside the tree being measured.
"""

from __future__ import annotations

import subprocess
from collections.abc import Sequence
from pathlib import Path
from typing import TypeVar

__all__ = ["REPO", "rotate", "snapshot", "src_of", "this_src"]

T = TypeVar("T")
REPO = Path(__file__).resolve().parent.parent


def rotate(items: Sequence[T], rep: int) -> list[T]:
    """``items`` in repetition ``rep``'s order: each goes first in turn."""
    if not items:
        return []
    k = rep % len(items)
    return [*items[k:], *items[:k]]


def this_src() -> Path:
    """The src/ folder of the tree running the benchmark."""
    return REPO / "src"


def snapshot(rev: str, *, whole: bool = False) -> Path:
    """``rev`` exported under /tmp (src/ only, or the whole tree with ``whole``); answers
    the folder, which holds ``COMMIT`` (its short sha) beside ``src/``."""
    stamp = REPO / "COMMIT"  # under snapshot.sh, HEAD is the snapshot's own commit
    if rev == "HEAD" and stamp.exists():
        rev = stamp.read_text().strip()
    sha = subprocess.run(
        ["git", "-C", str(REPO), "rev-parse", "--short", rev],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    snap = Path(f"/tmp/echomq-bench-{sha}{'-tree' if whole else ''}")
    if not (snap / "COMMIT").exists():
        snap.mkdir(parents=True, exist_ok=True)
        paths = [] if whole else ["src"]
        archive = subprocess.run(
            ["git", "-C", str(REPO), "archive", sha, *paths], check=True, capture_output=True
        ).stdout
        subprocess.run(["tar", "-x", "-C", str(snap)], input=archive, check=True)
        (snap / "COMMIT").write_text(sha + "\n")
    return snap


def src_of(base: str) -> Path:
    """A tree to measure beside this one: a folder holding echomq's package (an ``src/``),
    or a git revision, exported with :func:`snapshot`."""
    path = Path(base)
    if (path / "echomq").is_dir():
        return path.resolve()
    if (path / "src" / "echomq").is_dir():
        return (path / "src").resolve()
    return snapshot(base) / "src"
