"""An unknown queue (no meta hash) is exit 1 with one line on stderr, for every command that
names a queue, and no command creates it: a typo never makes a ghost queue. Bad input on
an unknown queue is still usage (exit 2); ``--create`` makes one where a producer may."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import trio

import echomq
from echomq import admin
from echomq._scripts.keyspace import Keyspace

GHOST = "nosuchq"


async def run(url: str, *args: str) -> subprocess.CompletedProcess[bytes]:
    env = {**os.environ, "ECHOMQ_URL": url}
    env.pop("ECHOMQ_QUEUE", None)
    with trio.fail_after(30):
        return await trio.run_process(
            [sys.executable, "-m", "echomq", *args],
            capture_stdout=True, capture_stderr=True, check=False, env=env,
        )  # fmt: skip


async def keys_of(conn: echomq.Connection, queue: str) -> list[bytes]:
    keys: list[bytes] = []
    cursor: object = b"0"
    while True:
        cursor, batch = await conn.execute("SCAN", cursor, "MATCH", Keyspace(queue).pattern)
        keys += batch
        if cursor in (b"0", 0):
            return keys


COMMANDS = [
    ["status", "{q}"],
    ["status", "{q}", "--json"],
    ["pause", "{q}"],
    ["resume", "{q}"],
    ["drain", "{q}"],
    ["obliterate", "{q}", "--force"],
    ["retention", "{q}"],
    ["retention", "{q}", "--keep-result", "1h"],
    ["limits", "{q}"],
    ["limits", "{q}", "--rate", "10/s"],
    ["groups", "{q}"],
    ["jobs", "{q}", "--state", "dead"],
    ["reprocess", "{q}", "--all-dead"],
    ["reprocess", "some-id", "-q", "{q}"],
    ["job", "some-id", "-q", "{q}"],
    ["remove", "some-id", "-q", "{q}"],
    ["explain", "some-id", "-q", "{q}"],
    ["cancel", "some-id", "-q", "{q}"],
    ["enqueue", "app.send", "[1]", "-q", "{q}"],
    ["watch", "{q}", "--duration", "5"],
    ["workers", "{q}"],
    ["repeat", "list", "{q}"],
    ["repeat", "add", "{q}", "k", "app.t", "--every", "5s"],
    ["repeat", "pause", "{q}", "k"],
    ["repeat", "resume", "{q}", "k"],
    ["repeat", "remove", "{q}", "k"],
    ["flows", "{q}", "--held"],
    ["flows", "{q}", "--remove-held", "some-id"],
]


@pytest.mark.parametrize("argv", COMMANDS, ids=lambda argv: " ".join(argv[:2]))
async def test_an_unknown_queue_is_exit_1_and_is_not_created(
    redis_url: str, conn: echomq.Connection, queue: str, argv: list[str]
) -> None:
    ghost = queue + "-" + GHOST
    p = await run(redis_url, *(a.replace("{q}", ghost) for a in argv))
    assert p.returncode == 1, (p.stdout, p.stderr)
    lines = p.stderr.decode().splitlines()
    assert len(lines) == 1, lines
    assert lines[0].startswith(f"echomq {argv[0]}: no queue '{ghost}' at redis")
    assert "`echomq status` lists them" in lines[0]
    assert await keys_of(conn, ghost) == []
    assert not await admin.queue_exists(conn, ghost)


async def test_the_default_queue_of_a_job_command_is_checked_too(redis_url: str) -> None:
    """No -q and no $ECHOMQ_QUEUE: the queue is ``default``; when it does not exist the
    refusal names it (rather than saying the job is missing)."""
    async with echomq.connect(redis_url) as conn:
        if await admin.queue_exists(conn, "default"):
            pytest.skip("another test made the queue 'default'")
    p = await run(redis_url, "explain", "some-id")
    assert p.returncode == 1 and "no queue 'default'" in p.stderr.decode()


@pytest.mark.parametrize(
    "argv",
    [
        ["enqueue", "t", "{not json", "-q", "{q}"],
        ["enqueue", "t", "--job-id", "bad id", "-q", "{q}"],
        ["job", "bad/id", "-q", "{q}"],
        ["reprocess", "bad/id", "-q", "{q}"],
        ["limits", "{q}", "--rate-kind", "sliding"],
        ["repeat", "add", "{q}", "k", "app.t", "--cron", "61 * * * *"],
        ["jobs", "{q}", "--state", "dead", "--group", "g"],
        ["reprocess", "{q}", "--all-dead", "-q", "other"],
        ["reprocess", "some-id", "-q", "{q}", "--task", "t"],
    ],
    ids=lambda argv: " ".join(argv[:3]),
)
async def test_bad_input_on_an_unknown_queue_is_still_usage(
    redis_url: str, conn: echomq.Connection, queue: str, argv: list[str]
) -> None:
    """Exit 2 whatever the server holds: the input's own gates speak first."""
    ghost = queue + "-" + GHOST
    p = await run(redis_url, *(a.replace("{q}", ghost) for a in argv))
    assert p.returncode == 2, (p.stdout, p.stderr)
    assert "no queue" not in p.stderr.decode() and "Traceback" not in p.stderr.decode()
    assert await keys_of(conn, ghost) == []


async def test_create_makes_the_queue_for_enqueue_and_repeat_add(
    redis_url: str, conn: echomq.Connection, queue: str
) -> None:
    p = await run(redis_url, "enqueue", "app.send", "[1]", "-q", queue, "--create")
    assert p.returncode == 0, p.stderr
    assert await admin.queue_exists(conn, queue)
    other = queue + "-r"
    p = await run(redis_url, "repeat", "add", other, "k", "app.t", "--every", "5s", "--create")
    assert p.returncode == 0, p.stderr
    assert await admin.queue_exists(conn, other)
    p = await run(redis_url, "pause", queue)  # now it exists: the command runs
    assert p.returncode == 0 and await admin.is_paused(conn, queue)


async def test_status_without_a_queue_lists_only_the_queues_that_exist(
    redis_url: str, conn: echomq.Connection, queue: str
) -> None:
    """The refused commands left nothing behind that ``status`` would show."""
    ghost = queue + "-" + GHOST
    for argv in (["pause", ghost], ["limits", ghost, "--rate", "5/s"], ["resume", ghost]):
        assert (await run(redis_url, *argv)).returncode == 1
    assert ghost not in await admin.list_queues(conn)
