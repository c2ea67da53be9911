"""README.md's first queue as the tests read it (tests/test_readme.py, tests/test_wheel.py):
the ```python blocks after ``<!-- file: NAME -->``, the ```sh block after ``<!-- run -->``."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text()
FILE = re.compile(r"<!-- file: (\S+) -->\n```python\n(.*?)^```", re.S | re.M)
RUN = re.compile(r"<!-- run -->\n```sh\n(.*?)^```", re.S | re.M)


def files() -> dict[str, str]:
    """The first queue's files, by name."""
    return {name: body for name, body in FILE.findall(README)}


def commands() -> list[str]:
    """The lines of the run block, as printed (comments kept)."""
    (block,) = RUN.findall(README)
    return [line.strip() for line in block.splitlines() if line.strip()]


def write_files(where: Path) -> None:
    for name, body in files().items():
        (where / name).write_text(body)
