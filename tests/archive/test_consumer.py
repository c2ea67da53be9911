"""The recording consumer against a real Redis and real stores: each job stored once,
acknowledged only after the commit, recovery first, outages waited out, bad data skipped."""

from __future__ import annotations

import logging
import sqlite3
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
import trio

import echomq
from echomq._model.completion import parse_entry
from echomq._scripts.keyspace import Keyspace
from echomq.archive import (
    ArchiveConfig,
    Archiver,
    ArchiveStatistics,
    SchemaMismatch,
    group_name,
    history,
    serve_archive,
)
from echomq.archive.store import SCHEMA_VERSION, open_store
from echomq.errors import InvalidArgument, InvalidKey
from echomq.testing import PostgresServer, RedisCluster, RedisServer

from ._support import completion_fields, pending, stored_async, until, xadd, xadd_jobs

FAST = ArchiveConfig(block=0.2, probe_interval=0.05, claim_idle=0.2, max_backoff=0.1)


@asynccontextmanager
async def archiving(
    url: str,
    queues: Sequence[str],
    store_url: str,
    *,
    consumer: str = "test-archiver",
    config: ArchiveConfig = FAST,
) -> AsyncIterator[Archiver]:
    """serve_archive for the block (started: its groups exist)."""
    async with trio.open_nursery() as nursery:
        archiver: Archiver = await nursery.start(
            lambda task_status: serve_archive(
                url, queues, store_url, consumer=consumer, config=config, task_status=task_status
            )
        )
        yield archiver
        nursery.cancel_scope.cancel()


def stats(archiver: Archiver, queue: str) -> ArchiveStatistics:
    return archiver.statistics()[queue]


async def test_entries_before_and_after_start_are_archived_once_and_acknowledged(
    redis_url: str, conn: echomq.Connection, queue: str, store_url: str
) -> None:
    """Two queues: what the stream held at start and what comes after are all stored,
    acknowledged, and left in the stream (the scripts trim it, not the archive)."""
    other = queue + "-b"
    await xadd_jobs(conn, queue, 5, prefix="early")
    with trio.fail_after(20):
        async with archiving(redis_url, [queue, other], store_url) as archiver:
            await xadd_jobs(conn, queue, 7, prefix="late")
            await xadd_jobs(conn, other, 3)
            await until(lambda: stored_async(store_url, queue), within=10)
            await until(lambda: _count_is(store_url, queue, 12))
            await until(lambda: _count_is(store_url, other, 3))
            await until(lambda: _no_pending(conn, queue))
            s = stats(archiver, queue)
    assert (s.archived, s.duplicates, s.corrupt, s.lost) == (12, 0, 0, 0)
    assert await conn.execute("XLEN", Keyspace(queue).completions) == 12
    page = await history(store_url, queue, limit=100)
    assert {j.id for j in page.jobs} == {f"early{i}" for i in range(5)} | {
        f"late{i}" for i in range(7)
    }


async def _count_is(store_url: str, queue: str, n: int) -> bool:
    return await stored_async(store_url, queue) == n


async def _no_pending(conn: echomq.Connection, queue: str) -> bool:
    return await pending(conn, queue) == 0


async def test_a_slice_committed_but_not_acknowledged_is_stored_once_after_restart(
    redis_url: str, conn: echomq.Connection, queue: str, sqlite_url: str
) -> None:
    """The crash between commit and XACK: the entries come back (own pending, id 0) and
    the store keeps each job once."""
    key, group = Keyspace(queue).completions, group_name(sqlite_url)
    await conn.execute("XGROUP", "CREATE", key, group, "0", "MKSTREAM")
    await xadd_jobs(conn, queue, 6)
    reply = await conn.execute("XREADGROUP", "GROUP", group, "c1", "COUNT", 10, "STREAMS", key, ">")
    jobs = [parse_entry(queue, i.decode(), f) for i, f in reply[0][1]]
    store = open_store(sqlite_url)
    assert store.write(jobs) == 6  # committed; never acknowledged
    store.close()
    assert await pending(conn, queue) == 6
    with trio.fail_after(10):
        async with archiving(redis_url, [queue], sqlite_url, consumer="c1") as archiver:
            await until(lambda: stats(archiver, queue).duplicates == 6)
            s = stats(archiver, queue)
    assert (s.archived, s.duplicates) == (0, 6)
    assert await pending(conn, queue) == 0
    assert await stored_async(sqlite_url, queue) == 6


async def test_a_dead_consumers_pending_entries_are_taken_over(
    redis_url: str, conn: echomq.Connection, queue: str, sqlite_url: str
) -> None:
    """Entries another consumer read and never acknowledged: XAUTOCLAIM after claim_idle."""
    key, group = Keyspace(queue).completions, group_name(sqlite_url)
    await conn.execute("XGROUP", "CREATE", key, group, "0", "MKSTREAM")
    await xadd_jobs(conn, queue, 4)
    await conn.execute("XREADGROUP", "GROUP", group, "gone", "COUNT", 10, "STREAMS", key, ">")
    with trio.fail_after(10):
        async with archiving(redis_url, [queue], sqlite_url, consumer="alive") as archiver:
            await until(lambda: _count_is(sqlite_url, queue, 4))
            await until(lambda: _no_pending(conn, queue))
            assert stats(archiver, queue).archived == 4


async def test_a_corrupt_entry_is_logged_skipped_and_acknowledged(
    redis_url: str,
    conn: echomq.Connection,
    queue: str,
    sqlite_url: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """No id, a non-integer time, an unknown state: logged, counted, acknowledged; the
    good entries around them are stored, and the archive goes on."""
    caplog.set_level(logging.ERROR, logger="echomq.archive")
    await xadd(conn, queue, completion_fields("good1"))
    await xadd(conn, queue, {"state": "completed", "token": 1})
    await xadd(conn, queue, completion_fields("bad-time", created_at="yesterday"))
    await xadd(conn, queue, completion_fields("bad-state", state="exploded"))
    await xadd(conn, queue, completion_fields("good2", unknown_field="kept"))
    with trio.fail_after(10):
        async with archiving(redis_url, [queue], sqlite_url) as archiver:
            await until(lambda: _count_is(sqlite_url, queue, 2))
            await until(lambda: _no_pending(conn, queue))
            await xadd(conn, queue, completion_fields("good3"))
            await until(lambda: stats(archiver, queue).archived == 3)
            s = stats(archiver, queue)
    assert (s.archived, s.corrupt) == (3, 3)
    messages = [r.getMessage() for r in caplog.records if "corrupt" in r.getMessage()]
    assert 1 <= len(messages) <= s.slices  # one line per slice, each entry's reason in it
    assert sum(int(m.split("skipped ", 1)[1].split(" ", 1)[0]) for m in messages) == 3
    assert any("no id" in m for m in messages) and any("created_at" in m for m in messages)
    page = await history(sqlite_url, queue, job_id="good2")
    assert page.jobs[0].extra == {"unknown_field": "kept"}


def _unfinished(archiver: Archiver, queue: str) -> int:
    backlog = stats(archiver, queue).backlog
    return backlog.unfinished if backlog is not None else -1


def _lock(path: str) -> sqlite3.Connection:
    """Hold SQLite's write lock (another process writing) until the connection commits."""
    lock = sqlite3.connect(path, isolation_level=None)
    lock.execute("BEGIN IMMEDIATE")
    return lock


async def test_store_down_then_up_entries_wait_in_the_stream(
    redis_url: str,
    conn: echomq.Connection,
    queue: str,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A store that cannot be written: retried with backoff, nothing acknowledged (the
    stream keeps the entries); once it can, everything is stored."""
    caplog.set_level(logging.WARNING, logger="echomq.archive")
    path = str(tmp_path / "a.db")
    open_store(path).close()
    url = f"sqlite:///{path}?timeout=0.02"
    lock = _lock(path)
    with trio.fail_after(20):
        async with archiving(redis_url, [queue], url) as archiver:
            await xadd_jobs(conn, queue, 5)
            await until(lambda: stats(archiver, queue).store_retries >= 3)
            await until(lambda: _unfinished(archiver, queue) == 5)  # pending + not delivered
            assert await pending(conn, queue) >= 1
            assert await stored_async(path, queue) == 0
            lock.execute("COMMIT")
            await until(lambda: _count_is(path, queue, 5))
            await until(lambda: _no_pending(conn, queue))
    lock.close()
    text = caplog.text
    assert "store unavailable" in text and "5 entries wait in the stream" in text
    assert "store back after" in text


async def test_postgres_down_then_up(
    redis_url: str, conn: echomq.Connection, queue: str, postgres_server: PostgresServer
) -> None:
    """The server itself stops (a crash) and comes back: entries wait in the stream and
    are archived after, each once."""
    with PostgresServer() as server:
        url = server.url + "?connect_timeout=1"
        with trio.fail_after(40):
            async with archiving(redis_url, [queue], url) as archiver:
                await xadd_jobs(conn, queue, 3, prefix="before")
                await until(lambda: stats(archiver, queue).archived == 3)
                await trio.to_thread.run_sync(server.kill)
                await xadd_jobs(conn, queue, 4, prefix="during")
                await until(lambda: stats(archiver, queue).store_retries >= 2, within=20)
                backlog = stats(archiver, queue).backlog
                assert backlog is not None and backlog.unfinished >= 4
                await trio.to_thread.run_sync(server.restart)
                await until(lambda: stats(archiver, queue).archived == 7, within=20)
                await until(lambda: _no_pending(conn, queue))
            assert await stored_async(url, queue) == 7


@pytest.mark.parametrize(
    ("limits", "expected"),
    [
        ({"retention": 0.4}, "oldest unarchived entry is"),  # an age past half of 0.4 s
        ({"max_len": 10}, "the stream holds 8 entries of at most ~10"),
    ],
)
async def test_the_archive_warns_before_entries_reach_the_trim_horizon(
    redis_url: str,
    conn: echomq.Connection,
    queue: str,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    limits: dict[str, float],
    expected: str,
) -> None:
    """Unarchived entries older than warn_fraction x retention, or a stream longer than
    warn_fraction x its MAXLEN: a warning (the store is down meanwhile)."""
    caplog.set_level(logging.WARNING, logger="echomq.archive")
    path = str(tmp_path / "a.db")
    open_store(path).close()
    lock = _lock(path)
    config = ArchiveConfig(
        block=0.2, probe_interval=0.05, max_backoff=0.05, warn_fraction=0.5, **limits
    )
    with trio.fail_after(10):
        async with archiving(redis_url, [queue], f"sqlite:///{path}?timeout=0.02", config=config):
            await xadd_jobs(conn, queue, 8)
            await until(lambda: "is behind" in caplog.text)
    lock.execute("COMMIT")
    lock.close()
    warning = next(r.getMessage() for r in caplog.records if "is behind" in r.getMessage())
    assert expected in warning and "8 entries not yet archived" in warning


async def test_entries_trimmed_before_they_were_archived_are_reported_lost(
    redis_url: str,
    conn: echomq.Connection,
    queue: str,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The archive lags past retention (store down) and the stream is trimmed under it:
    the entries it never read are counted and logged as lost; the rest is archived."""
    caplog.set_level(logging.ERROR, logger="echomq.archive")
    path = str(tmp_path / "a.db")
    open_store(path).close()
    lock = _lock(path)
    config = ArchiveConfig(batch=1, block=0.2, probe_interval=0.05, max_backoff=0.05)
    with trio.fail_after(10):
        async with archiving(
            redis_url, [queue], f"sqlite:///{path}?timeout=0.02", config=config
        ) as archiver:
            await xadd_jobs(conn, queue, 1, prefix="first")
            await until(lambda: _pending_is(conn, queue, 1))  # delivered: held by the archive
            await xadd_jobs(conn, queue, 5, prefix="next")
            await conn.execute("XTRIM", Keyspace(queue).completions, "MAXLEN", 2)  # 3 unread gone
            await until(lambda: stats(archiver, queue).lost == 3)
            lock.execute("COMMIT")
            await until(lambda: _count_is(path, queue, 3))
            await until(lambda: _no_pending(conn, queue))
    lock.close()
    assert "at least 3 entries were trimmed" in caplog.text
    page = await history(f"sqlite:///{path}", queue)
    assert sorted(j.id for j in page.jobs) == ["first0", "next3", "next4"]


async def _pending_is(conn: echomq.Connection, queue: str, n: int) -> bool:
    return await pending(conn, queue) == n


async def test_a_pending_entry_trimmed_away_is_reported_lost(
    redis_url: str,
    conn: echomq.Connection,
    queue: str,
    sqlite_url: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Delivered to this consumer, then trimmed before it was archived (a crash held it):
    re-reading the pending list finds it empty: logged, counted, acknowledged."""
    caplog.set_level(logging.ERROR, logger="echomq.archive")
    key, group = Keyspace(queue).completions, group_name(sqlite_url)
    await conn.execute("XGROUP", "CREATE", key, group, "0", "MKSTREAM")
    await xadd_jobs(conn, queue, 3)
    await conn.execute("XREADGROUP", "GROUP", group, "c1", "COUNT", 10, "STREAMS", key, ">")
    await conn.execute("XTRIM", key, "MAXLEN", 1)
    with trio.fail_after(10):
        async with archiving(redis_url, [queue], sqlite_url, consumer="c1") as archiver:
            await until(lambda: stats(archiver, queue).slices >= 1)
            s = stats(archiver, queue)
    assert (s.archived, s.lost) == (1, 2)
    assert await pending(conn, queue) == 0
    lines = [r.getMessage() for r in caplog.records if "trimmed before" in r.getMessage()]
    assert len(lines) == 1 and "2 entries were trimmed before they were archived" in lines[0]


def _trimmed_lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if "trimmed before" in r.getMessage()]


async def test_a_slice_of_trimmed_entries_is_one_log_line_with_a_count(
    redis_url: str,
    conn: echomq.Connection,
    queue: str,
    sqlite_url: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Thousands of held entries trimmed away: one ERROR line per slice, each with its
    count and the first ids, never one per entry."""
    caplog.set_level(logging.ERROR, logger="echomq.archive")
    key, group = Keyspace(queue).completions, group_name(sqlite_url)
    await conn.execute("XGROUP", "CREATE", key, group, "0", "MKSTREAM")
    await xadd_jobs(conn, queue, 3000)
    await conn.execute("XREADGROUP", "GROUP", group, "c1", "COUNT", 5000, "STREAMS", key, ">")
    await conn.execute("XTRIM", key, "MAXLEN", 1)
    with trio.fail_after(30):
        async with archiving(redis_url, [queue], sqlite_url, consumer="c1") as archiver:
            await until(lambda: stats(archiver, queue).lost == 2999)
            await until(lambda: _no_pending(conn, queue))
            # a slice is counted once its ack returns: wait for the last one's count
            await until(lambda: stats(archiver, queue).slices >= len(_trimmed_lines(caplog)))
            s = stats(archiver, queue)
    lines = _trimmed_lines(caplog)
    assert 1 <= len(lines) <= s.slices, lines[:3]
    counted = sum(int(line.split(": ", 1)[1].split(" ", 1)[0]) for line in lines)
    assert counted == 2999 and all("more" in line for line in lines)
    assert s.archived == 1


async def test_a_redis_restart_is_waited_out_and_the_group_made_again(
    queue: str, sqlite_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Redis dies and comes back empty: the archive reconnects with backoff, makes its
    group again, and archives what the new stream gets."""
    caplog.set_level(logging.WARNING, logger="echomq.archive")
    with RedisServer() as server:
        url = server.url + "?connect_timeout=0.5"
        with trio.fail_after(30):
            async with echomq.connect(url) as c, archiving(url, [queue], sqlite_url) as archiver:
                await xadd_jobs(c, queue, 2, prefix="a")
                await until(lambda: stats(archiver, queue).archived == 2)
                await trio.to_thread.run_sync(server.restart)
                await xadd_jobs(c, queue, 3, prefix="b")
                await until(lambda: stats(archiver, queue).archived == 5, within=20)
    assert stats(archiver, queue).redis_errors >= 1
    assert "Redis" in caplog.text


async def test_an_unusable_store_stops_the_archive_at_once(
    redis_url: str, queue: str, sqlite_url: str
) -> None:
    """A store made by a newer echomq: serve_archive raises instead of retrying forever."""
    open_store(sqlite_url).close()
    with sqlite3.connect(sqlite_url.removeprefix("sqlite:///")) as db:
        db.execute(
            "UPDATE emq_archive_meta SET value = ? WHERE name = 'schema_version'",
            (str(SCHEMA_VERSION + 1),),
        )
    with trio.fail_after(10), pytest.raises(SchemaMismatch):
        await serve_archive(redis_url, [queue], sqlite_url)


@pytest.mark.parametrize(
    ("queues", "store", "error"),
    [
        (["bad name"], "sqlite:///a.db", InvalidKey),
        ("q", "sqlite:///a.db", InvalidArgument),
        ([], "sqlite:///a.db", InvalidArgument),
        (["q", "q"], "sqlite:///a.db", InvalidArgument),
        (["q"], "mysql://x/y", InvalidArgument),
    ],
)
async def test_bad_arguments_are_refused_before_any_io(
    closed_port_url: str, queues: object, store: str, error: type[Exception]
) -> None:
    with trio.fail_after(5), pytest.raises(error):
        await serve_archive(closed_port_url, queues, store)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "options", [{"batch": 0}, {"block": -1}, {"retention": float("inf")}, {"warn_fraction": 2}]
)
def test_a_bad_config_is_refused(options: dict[str, float]) -> None:
    with pytest.raises(InvalidArgument):
        ArchiveConfig(**options)  # type: ignore[arg-type]


async def test_the_archive_runs_on_a_redis_cluster(
    redis_cluster: RedisCluster, queue: str, sqlite_url: str
) -> None:
    """Every command it sends names one queue's stream (one slot): queues on different
    masters are archived alike, through the cluster wire."""
    queues = [queue, queue + "-x", queue + "-y"]
    with trio.fail_after(30):
        async with echomq.connect(redis_cluster.url) as c:
            async with archiving(redis_cluster.url, queues, sqlite_url) as archiver:
                for q in queues:
                    await xadd_jobs(c, q, 4)
                for q in queues:
                    await until(lambda q=q: stats(archiver, q).archived == 4)  # type: ignore[misc]
                for q in queues:
                    await until(lambda q=q: _no_pending(c, q))  # type: ignore[misc]
                backlog = stats(archiver, queue).backlog
    assert backlog is not None and backlog.exists
    assert sorted(j.id for j in (await history(sqlite_url, queue)).jobs) == [
        f"j{i}" for i in range(4)
    ]
