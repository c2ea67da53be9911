"""docs/testing.md's examples run as written: each ``<!-- file: NAME -->`` block is
written out as a small project, and pytest runs it in a child process (as a user would)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import trio

DOC = Path(__file__).parents[2] / "docs" / "testing.md"
BLOCK = re.compile(r"<!-- file: (\S+) -->\n```\w*\n(.*?)\n```", re.S)


def test_every_example_block_names_its_file() -> None:
    """No fenced example is left out of the run: each python block is a named file."""
    text = DOC.read_text()
    named = {m.start(2) for m in BLOCK.finditer(text)}
    fenced = [m.start(1) for m in re.finditer(r"```python\n(.*?)\n```", text, re.S)]
    assert fenced and all(start in named for start in fenced)


async def test_the_examples_pass_as_a_users_suite(tmp_path: Path) -> None:
    files = {name: body + "\n" for name, body in BLOCK.findall(DOC.read_text())}
    for name, body in files.items():
        (tmp_path / name).write_text(body)
    tests = sum(
        len(re.findall(r"^async def test_", body, re.M))
        for name, body in files.items()
        if name.startswith("test_")
    )
    with trio.fail_after(120):
        done = await trio.run_process(
            [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(tmp_path)],
            cwd=tmp_path,
            capture_stdout=True,
            stderr=subprocess.STDOUT,
            check=False,
        )
    output = done.stdout.decode(errors="replace")
    assert done.returncode == 0, output[-6000:]
    assert f"{tests} passed" in output, output[-3000:]
