"""The typing proofs hold: mypy --strict over tests/typing (its own config) reports
nothing, so every right call passes and every wrong call is still an error."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).parent


def test_task_calls_are_typed() -> None:
    """mypy checks tasks_typed.py: right calls pass, wrong ones are the errors marked."""
    env = dict(os.environ, MYPY_CACHE_DIR=str(HERE.parent.parent / ".mypy_cache" / "typing"))
    run = subprocess.run(
        [sys.executable, "-m", "mypy", "--config-file", str(HERE / "mypy.ini"),
         str(HERE / "tasks_typed.py")],
        capture_output=True, text=True, env=env, timeout=300,
    )  # fmt: skip
    assert run.returncode == 0, run.stdout + run.stderr
