"""kill -9 the archiver (a subprocess running ``echomq archive``) in the middle of a slice,
at both bad moments, then restart it: nothing is lost and nothing is stored twice.

The moments are made, not hoped for: the test holds the store's write lock, so a slice
waits between its read and its commit; with the lock released under ``CLIENT PAUSE WRITE``
the commit happens and the XACK that follows waits on Redis.
"""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path

import trio

import echomq
from echomq._scripts.keyspace import Keyspace
from echomq.archive import group_name
from echomq.archive.store import open_store
from echomq.errors import ServerError

from ._support import stored_async, until, xadd_jobs

N, BATCH = 300, 50


def hold_write_lock(store_url: str) -> Callable[[], None]:
    """Block the store's writers (as a long transaction of another process would); answers
    the function that lets them go. Readers are not blocked."""
    if store_url.startswith("sqlite"):
        path = store_url.removeprefix("sqlite:///").split("?")[0]
        db = sqlite3.connect(path, isolation_level=None)
        db.execute("BEGIN IMMEDIATE")

        def release_sqlite() -> None:
            db.execute("COMMIT")
            db.close()

        return release_sqlite
    import psycopg

    pg = psycopg.connect(store_url)
    pg.execute("LOCK TABLE emq_finished_jobs IN SHARE ROW EXCLUSIVE MODE")

    def release_pg() -> None:
        pg.commit()
        pg.close()

    return release_pg


@asynccontextmanager
async def archiver_process(
    redis_url: str, queue: str, store_url: str, consumer: str, log: Path
) -> AsyncIterator[trio.Process]:
    """``python -m echomq archive`` as a child; killed on the way out if still alive."""
    command = [
        sys.executable, "-m", "echomq", "archive", "--url", redis_url, "--queue", queue,
        "--to", store_url, "--batch", str(BATCH), "--consumer", consumer, "--claim-idle", "0.5",
    ]  # fmt: skip
    with open(log, "ab") as out:  # noqa: ASYNC230 - a local file, before the child starts
        proc = await trio.lowlevel.open_process(command, stdout=out, stderr=subprocess.STDOUT)
    try:
        yield proc
    finally:
        if proc.returncode is None:
            proc.kill()
        with trio.move_on_after(10):
            await proc.wait()


async def consumer_pending(
    conn: echomq.Connection, queue: str, consumer: str, store_url: str
) -> int:
    try:
        reply = await conn.execute("XPENDING", Keyspace(queue).completions, group_name(store_url))
    except ServerError:  # NOGROUP: the archiver has not made its group yet
        return 0
    for name, count in reply[3] or []:
        if name.decode() == consumer:
            return int(count)
    return 0


async def unfinished(conn: echomq.Connection, queue: str) -> int:
    """Entries the group has not acknowledged: pending plus never delivered."""
    groups = await conn.execute("XINFO", "GROUPS", Keyspace(queue).completions)
    info = dict(zip(groups[0][::2], groups[0][1::2], strict=True))
    return int(info[b"pending"]) + int(info[b"lag"] or 0)


async def test_kill_9_mid_slice_loses_nothing_and_stores_nothing_twice(
    redis_url: str, conn: echomq.Connection, queue: str, store_url: str, tmp_path: Path
) -> None:
    if store_url.startswith("sqlite"):
        store_url += "?timeout=60"  # wait on the test's lock rather than retrying
    open_store(store_url).close()
    log = tmp_path / "archiver.log"
    await xadd_jobs(conn, queue, N)

    with trio.fail_after(60):
        # 1. killed between its read and its commit
        release = hold_write_lock(store_url)
        async with archiver_process(redis_url, queue, store_url, "a", log) as proc:
            await until(lambda: _pending_is(conn, queue, "a", BATCH, store_url), within=20)
            proc.send_signal(signal.SIGKILL)
            await proc.wait()
        release()
        assert await stored_async(store_url, queue) == 0

        # 2. killed between its commit and its XACK
        release = hold_write_lock(store_url)
        async with archiver_process(redis_url, queue, store_url, "b", log) as proc:
            await until(lambda: _pending_is(conn, queue, "b", BATCH, store_url), within=20)
            await conn.execute("CLIENT", "PAUSE", 20_000, "WRITE")
            try:
                release()
                await until(lambda: _stored_is(store_url, queue, BATCH), within=20)
                proc.send_signal(signal.SIGKILL)
                await proc.wait()
            finally:
                await conn.execute("CLIENT", "UNPAUSE")
        # committed, not acknowledged
        assert await consumer_pending(conn, queue, "b", store_url) == BATCH

        # 3. restarted ("b" again: it re-reads its own pending slice, and takes over a's)
        async with archiver_process(redis_url, queue, store_url, "b", log) as proc:
            await until(lambda: _stored_is(store_url, queue, N), within=30)
            await until(lambda: _unfinished_is(conn, queue, 0), within=10)
            proc.send_signal(signal.SIGTERM)
            assert await proc.wait() == 0, log.read_text()

    assert f"{BATCH} re-delivered entries were archived already" in log.read_text()
    counts = await trio.to_thread.run_sync(_counts_by_id, store_url, queue)
    assert sorted(counts) == sorted(f"j{i}" for i in range(N))
    assert set(counts.values()) == {1}


async def _pending_is(
    conn: echomq.Connection, queue: str, consumer: str, n: int, store_url: str
) -> bool:
    return await consumer_pending(conn, queue, consumer, store_url) == n


async def _stored_is(store_url: str, queue: str, n: int) -> bool:
    return await stored_async(store_url, queue) == n


async def _unfinished_is(conn: echomq.Connection, queue: str, n: int) -> bool:
    return await unfinished(conn, queue) == n


def _counts_by_id(store_url: str, queue: str) -> dict[str, int]:
    """job id -> rows, read with the driver itself (not through the archive's code)."""
    sql = "SELECT job_id, count(*) FROM emq_finished_jobs WHERE queue = %s GROUP BY job_id"
    if store_url.startswith("sqlite"):
        path = store_url.removeprefix("sqlite:///").split("?")[0]
        with sqlite3.connect(path) as db:
            return dict(db.execute(sql.replace("%s", "?"), (queue,)).fetchall())
    import psycopg

    with psycopg.connect(store_url) as pg:
        return {str(k): int(v) for k, v in pg.execute(sql, (queue,)).fetchall()}


assert os.name == "posix"  # SIGKILL, SIGTERM
