"""README.md is a front door that works: its first queue runs exactly as printed, its
naming warning is true, its benchmark table is the published one, and its links lead
somewhere.

How the page is read:
- a ```python block after ``<!-- file: NAME -->`` is written to NAME in a fresh directory
  (every python block of the page must be one: nothing printed goes unrun);
- the ```sh block after ``<!-- run -->`` is run line by line, as a shell would, in that
  directory, against a private redis-server: ``export ECHOMQ_URL=...`` gives the URL the
  way the README says (the test's server's, for the printed default), ``echomq ... &``
  starts in the background (this venv's ``echomq`` script), ``python X.py`` runs with this
  interpreter and must print what its ``# prints:`` comment says.
"""

from __future__ import annotations

import os
import re
import shlex
import sys
from contextlib import AsyncExitStack
from pathlib import Path

import pytest
import trio
from benchmarks import report

from _readme import FILE, README, ROOT, RUN, commands, files, write_files
from echomq.config import DEFAULT_URL, URL_VARIABLE
from echomq.testing import RedisServer, open_worker_process

ECHOMQ = Path(sys.executable).parent / "echomq"  # the console script of this install


def test_every_python_block_is_a_file_the_test_runs() -> None:
    fenced = len(re.findall(r"^```python\n", README, re.M))
    assert fenced == len(FILE.findall(README)) == 2
    assert sorted(files()) == ["producer.py", "tasks.py"]
    assert len(RUN.findall(README)) == 1


def test_the_readme_says_how_to_install_and_keeps_the_two_commands() -> None:
    assert "pip install echomq" in README
    assert "pip install -e ." in README
    two = README.index("## Try it: two commands")
    assert two < README.index("## A first queue")
    assert "./run demo" in README[two:] and "./run test" in README[two:]


async def _run(command: list[str], env: dict[str, str], cwd: Path) -> str:
    with trio.fail_after(60):
        done = await trio.run_process(
            command, env=env, cwd=cwd, capture_stdout=True, capture_stderr=True, check=False
        )
    out, err = done.stdout.decode(errors="replace"), done.stderr.decode(errors="replace")
    assert done.returncode == 0, f"{shlex.join(command)} exited {done.returncode}:\n{out}\n{err}"
    return out


async def test_the_first_queue_runs_as_printed(tmp_path: Path) -> None:
    write_files(tmp_path)
    env = {k: v for k, v in os.environ.items() if k != URL_VARIABLE}
    ran: list[str] = []
    with RedisServer() as server:
        async with AsyncExitStack() as background:
            for line in commands():
                words = shlex.split(line, comments=True)
                if words[0] == "export":
                    name, _, value = words[1].partition("=")
                    assert (name, value) == (URL_VARIABLE, DEFAULT_URL), line
                    env[name] = server.url  # "your Redis": the test's own
                elif words[-1] == "&":
                    assert words[:2] == ["echomq", "worker"] and len(words) == 4, line
                    worker = await background.enter_async_context(
                        open_worker_process(
                            words[2],
                            entry=[str(ECHOMQ), "worker"],
                            env={URL_VARIABLE: env.get(URL_VARIABLE)},
                            cwd=tmp_path,
                        )
                    )
                else:
                    assert words[0] == "python" and len(words) == 2, line
                    expect = line.partition("# prints:")[2].strip()
                    out = await _run([sys.executable, words[1]], env, tmp_path)
                    assert out.strip() == expect, line
                ran.append(words[0])
            assert worker.returncode is None
            assert await worker.stop() == 0
    assert ran == ["export", "echomq", "python"]
    assert " ERROR " not in worker.output, worker.output


SCRIPT = """
import trio

import echomq

queue = echomq.Queue("emails")


@queue.task
async def send(to: str) -> str:
    return f"sent to {to}"


async def main() -> None:
    async with queue.open():
        handle = await send.delay("a@b.c")
        print(send.name)
        try:
            await handle.result(timeout=30)
        except echomq.JobFailed as exc:
            print(exc.error)


if __name__ == "__main__":
    trio.run(main)
"""


async def test_a_task_defined_in_the_script_you_run_is_not_the_workers(tmp_path: Path) -> None:
    """The README's warning, as it happens: ``python app.py`` enqueues ``__main__.send``;
    the worker serving ``app:queue`` knows ``app.send``; the job fails, the worker lives."""
    (tmp_path / "app.py").write_text(SCRIPT)
    with RedisServer() as server:
        env = {**os.environ, URL_VARIABLE: server.url}
        async with open_worker_process("app:queue", url=server.url, cwd=tmp_path) as worker:
            out = await _run([sys.executable, "app.py"], env, tmp_path)
            assert worker.returncode is None
    name, error = out.strip().splitlines()
    assert name == "__main__.send"
    assert "TaskNotRegistered" in error and "__main__.send" in error


def _section(title: str) -> str:
    start = README.index(f"## {title}\n")
    end = README.find("\n## ", start + 1)
    return README[start : end if end != -1 else None]


def test_the_benchmark_table_is_the_published_one() -> None:
    """Its lines are benchmarks/README.md's generated ``peers`` table, as rendered from the
    published results now (a rerun that changes them fails here until the README follows)."""
    table = [line for line in _section("How fast").splitlines() if line.startswith("|")]
    assert len(table) >= 3
    rendered = report.render("peers").splitlines()
    for line in table:
        assert line in rendered, line
    assert "benchmarks/README.md" in _section("How fast")


@pytest.mark.parametrize("target", sorted(set(re.findall(r"\]\(([^)#:]+)(?:#[^)]*)?\)", README))))
def test_every_link_leads_somewhere(target: str) -> None:
    assert (ROOT / target).exists(), target


def test_the_url_rule_is_the_documented_one() -> None:
    """The README's one-line URL rule names the sources in the order docs/wire.md does."""
    line = next(p for p in README.split("\n\n") if p.startswith("The URL:"))
    order = [line.index(s) for s in ("--url", "Queue(url=...)", "$ECHOMQ_URL", DEFAULT_URL)]
    assert order == sorted(order)
    assert "docs/wire.md#which-url" in line


PROCESS_SCRIPT = """
import trio

import echomq

queue = echomq.Queue("squares")


@queue.task(process=True)
def square(n: int) -> int:
    return n * n


async def main() -> None:
    print("serving", flush=True)
    worker = echomq.Worker(queue, concurrency=2, grace=0)
    async with queue.open(), trio.open_nursery() as nursery:
        await nursery.start(worker.serve)
        try:
            print(await (await square.delay(7)).result(timeout=20), flush=True)
        except echomq.JobFailed as exc:
            print(exc.error, flush=True)
        worker.shutdown()


{guard}trio.run(main)
"""


@pytest.mark.parametrize("guarded", [True, False], ids=["guarded", "unguarded"])
async def test_a_script_serving_process_tasks_needs_a_main_guard(
    tmp_path: Path, redis_url: str, queue: str, guarded: bool
) -> None:
    """The README's other warning: the pool's children import the script again (spawn).
    Under ``if __name__ == "__main__":`` the program runs once and the job answers; without
    it each child runs the whole program again (another worker, another producer)."""
    guard = 'if __name__ == "__main__":\n    ' if guarded else ""
    script = PROCESS_SCRIPT.replace('"squares"', repr(queue)).format(guard=guard)
    (tmp_path / "script.py").write_text(script)
    env = {**os.environ, URL_VARIABLE: redis_url}
    lines = (await _run([sys.executable, "script.py"], env, tmp_path)).splitlines()
    if guarded:
        assert lines == ["serving", "49"]
    else:
        assert lines.count("serving") > 1, lines
