"""docs/tutorial.md, run as a reader would: every code block, in order, against a real
redis-server, in a fresh directory. And every public module has its page in the API
reference (docs/reference/, built by mkdocstrings: ``mkdocs build --strict`` in the test
command fails on a broken link or a docstring it cannot read).

How the blocks are read:
- ```python whose first line is ``# name.py``: written to that file (a module to import);
- any other ```python: run as a script (a process of its own) that must exit 0;
- ```sh: each line a command that must exit 0, except ``echomq worker ...``, started in the
  background (ready once it logs that it serves) and stopped when the page ends;
  ``NAME=value`` words before the command are its environment;
- ```console and anything else: shown, not run (installing things, a systemd unit).
Every process gets ``ECHOMQ_URL`` of the test's server; ``echomq`` is this interpreter's.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from contextlib import AsyncExitStack
from pathlib import Path

import pytest
import trio

from echomq.testing import RedisServer, open_worker_process

DOCS = Path(__file__).resolve().parent.parent / "docs"
BLOCK = re.compile(r"^```(\w+)[^\n]*\n(.*?)^```", re.MULTILINE | re.DOTALL)
_ENV = re.compile(r"^[A-Z_][A-Z0-9_]*=")


def blocks(page: Path) -> list[tuple[str, str]]:
    return [(m[1], m[2]) for m in BLOCK.finditer(page.read_text())]


def test_the_tutorial_has_runnable_blocks() -> None:
    """The page keeps its shape: files, scripts and commands, in that order of appearance."""
    kinds = [kind for kind, _ in blocks(DOCS / "tutorial.md")]
    assert kinds.count("python") >= 8 and kinds.count("sh") >= 3


async def test_the_tutorial_runs(tmp_path: Path) -> None:
    """Each block of docs/tutorial.md does what the page says, against a private Redis."""
    with RedisServer() as server:
        env = {**os.environ, "ECHOMQ_URL": server.url, "PYTHONPATH": str(tmp_path)}
        async with AsyncExitStack() as workers:
            for number, (kind, text) in enumerate(blocks(DOCS / "tutorial.md"), 1):
                where = f"block {number} ({kind})"
                if kind == "python":
                    first = text.splitlines()[0]
                    match = re.fullmatch(r"# (\w+\.py)", first.strip())
                    if match:
                        (tmp_path / match[1]).write_text(text)
                        continue
                    await run([sys.executable, "-c", text], env, tmp_path, where, show=text)
                elif kind == "sh":
                    for line in filter(None, (raw.strip() for raw in text.splitlines())):
                        words = shlex.split(line)
                        extra = {}
                        while words and _ENV.match(words[0]):
                            name, _, value = words.pop(0).partition("=")
                            extra[name] = value
                        assert words[0] == "echomq", f"{where}: only echomq commands: {line}"
                        if words[1] == "worker":
                            await workers.enter_async_context(
                                open_worker_process(
                                    words[2],
                                    args=words[3:],
                                    cwd=tmp_path,
                                    env={**extra, "ECHOMQ_URL": server.url},
                                )
                            )
                        else:
                            command = [sys.executable, "-m", "echomq", *words[1:]]
                            await run(command, {**env, **extra}, tmp_path, where, show=line)


async def run(command: list[str], env: dict[str, str], cwd: Path, where: str, show: str) -> None:
    with trio.fail_after(60):
        done = await trio.run_process(
            command, env=env, cwd=cwd, capture_stdout=True, capture_stderr=True, check=False
        )
    if done.returncode != 0:
        pytest.fail(
            f"{where} exited {done.returncode}:\n{show}\n--- stdout\n"
            f"{done.stdout.decode(errors='replace')}\n--- stderr\n"
            f"{done.stderr.decode(errors='replace')}"
        )


def _public_modules() -> set[str]:
    """echomq and each public module or package directly inside it."""
    package = DOCS.parent / "src" / "echomq"
    found = {"echomq"}
    for path in package.iterdir():
        name = path.stem if path.suffix == ".py" else path.name
        is_module = path.suffix == ".py" or (path / "__init__.py").exists()
        if is_module and not name.startswith("_") and name not in PRIVATE_SURFACES:
            found.add(f"echomq.{name}")
    return found


# public modules that are applications, not an API: the CLI, the dashboard's server, the
# archive's service (its verbs are on the CLI), and the modules whose names echomq re-exports
# (app, queue, task, handle, canvas: the reference page of echomq renders them)
PRIVATE_SURFACES = {"cli", "dashboard", "archive", "app", "queue", "task", "handle", "canvas"}


def test_every_public_module_has_a_reference_page() -> None:
    """Each public module is rendered by a ``::: module`` page under docs/reference/, and
    each page is in the site's navigation (mkdocs.yml)."""
    pages = {
        line.removeprefix("::: ").strip(): page
        for page in (DOCS / "reference").glob("*.md")
        for line in page.read_text().splitlines()
        if line.startswith("::: ")
    }
    missing = _public_modules() - set(pages)
    assert not missing, f"no page in docs/reference/ renders {sorted(missing)}"
    nav = (DOCS.parent / "mkdocs.yml").read_text()
    for page in pages.values():
        assert f"reference/{page.name}" in nav, f"mkdocs.yml's nav lacks reference/{page.name}"


def test_every_page_is_linked_from_the_index() -> None:
    """docs/index.md links every page of docs/ (and the README links the index)."""
    index = (DOCS / "index.md").read_text()
    for page in sorted(DOCS.glob("*.md")):
        if page.name != "index.md":
            assert f"({page.name})" in index, f"docs/index.md does not link {page.name}"
    readme = (DOCS.parent / "README.md").read_text()
    for page in ("docs/tutorial.md", "docs/asyncio.md", "docs/observability.md"):
        assert page in readme, f"README.md does not link {page}"


def test_the_fastapi_example_is_what_the_docs_show() -> None:
    """docs/asyncio.md quotes the example app's files; subprocess: the files import."""
    page = (DOCS / "asyncio.md").read_text()
    assert "docs/examples/fastapi/app.py" in page
    done = subprocess.run(
        [sys.executable, "-c", "import app, tasks"],
        cwd=DOCS / "examples" / "fastapi",
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
