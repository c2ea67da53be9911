"""A consumer group per store (archive/groups.py): two archivers of different stores each
get every finished job; two archivers of one store share the work and store nothing
twice; the move from the one group ``archive`` skips nothing and reads nothing twice; a
consumer name in use is warned of; default names are ``<host>:<pid>``."""

from __future__ import annotations

import logging
import os
import signal
import socket
import subprocess
import sys
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
import trio

import echomq
from echomq import admin, jobs
from echomq._model.completion import parse_entry
from echomq._scripts.keyspace import Keyspace
from echomq.archive import (
    LEGACY_GROUP,
    ArchiveConfig,
    Archiver,
    default_consumer,
    group_name,
    history,
    serve_archive,
)
from echomq.archive.groups import consumers, forget_idle_consumers
from echomq.archive.store import open_store
from echomq.errors import InvalidArgument

from ._support import pending, stored_async, until, xadd_jobs

HOST = socket.gethostname()
# no take-over while the test runs: each entry goes to exactly one consumer of a group
SHARE = ArchiveConfig(block=0.2, probe_interval=0.05, claim_idle=30.0, max_backoff=0.1)


@asynccontextmanager
async def archiving(
    url: str, queues: Sequence[str], store_url: str, **options: object
) -> AsyncIterator[Archiver]:
    async with trio.open_nursery() as nursery:
        archiver: Archiver = await nursery.start(
            lambda task_status: serve_archive(
                url, queues, store_url, task_status=task_status,
                **{"config": SHARE, **options},  # type: ignore[arg-type]
            )
        )  # fmt: skip
        yield archiver
        nursery.cancel_scope.cancel()


async def finish_jobs(conn: echomq.Connection, queue: str, n: int) -> list[str]:
    """``n`` jobs finished by the scripts themselves: two of three completed, one dead."""
    ids = await jobs.enqueue_many(
        conn, queue, [jobs.NewJob(payload=b"{}", task="app.t") for _ in range(n)]
    )
    for i, c in enumerate(await jobs.claim(conn, queue, 60_000, count=n)):
        if i % 3:
            await jobs.complete(conn, queue, c.id, c.token, b'"ok"')
        else:
            await jobs.fail(conn, queue, c.id, c.token, "ValueError: no", dead=True)
    return ids


async def _stored_is(store_url: str, queue: str, n: int) -> bool:
    return await stored_async(store_url, queue) == n


# -- the names ----------------------------------------------------------------------------


def test_group_names_say_where_the_store_is(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "a.db"
    assert group_name(f"sqlite:///{path}") == f"archive:sqlite:{HOST}:{path}"
    assert group_name(str(path)) == group_name(f"sqlite:///{path}?timeout=9")
    monkeypatch.chdir(tmp_path)
    assert group_name("sqlite:///a.db") == group_name("a.db") == f"archive:sqlite:{HOST}:{path}"
    remote = "postgresql://u:secret@db.example.com/echomq"
    assert group_name(remote) == "archive:postgresql:db.example.com:5432/echomq"
    assert "secret" not in group_name(remote)
    assert group_name("postgres://DB.example.com:6432/x") == (
        "archive:postgresql:db.example.com:6432/x"
    )
    for local in ("postgresql://localhost/e", "postgresql://127.0.0.1/e", "postgresql:///e"):
        assert group_name(local) == f"archive:postgresql:{HOST}:5432/e", local
    assert group_name("postgresql:///?dbname=e&host=/run/pg&port=5433") == (
        f"archive:postgresql:{HOST}:5433/e"
    )
    assert group_name(f"sqlite:///{path}") != group_name(f"sqlite:///{tmp_path / 'b.db'}")
    assert default_consumer() == f"{HOST}:{os.getpid()}"


def test_a_group_given_by_hand_is_checked_before_any_io(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'a.db'}"
    assert Archiver("redis://127.0.0.1:1/0", ["q"], url, group="mine").group == "mine"
    assert Archiver("redis://127.0.0.1:1/0", ["q"], url).group == group_name(url)
    for bad in ("", "two words", "tab\there"):
        with pytest.raises(InvalidArgument):
            Archiver("redis://127.0.0.1:1/0", ["q"], url, group=bad)


# -- different stores, one store --------------------------------------------------------------


async def test_two_archivers_of_different_stores_each_get_every_job(
    redis_url: str, conn: echomq.Connection, queue: str, sqlite_url: str, pg_url: str
) -> None:
    """SQLite and PostgreSQL on one queue, at once: 27 finished jobs in each store."""
    with trio.fail_after(30):
        async with (
            archiving(redis_url, [queue], sqlite_url) as a,
            archiving(redis_url, [queue], pg_url) as b,
        ):
            assert a.group != b.group
            await finish_jobs(conn, queue, 27)
            await until(lambda: _stored_is(sqlite_url, queue, 27))
            await until(lambda: _stored_is(pg_url, queue, 27))
            await until(lambda: _no_pending(conn, queue))
    assert a.statistics()[queue].archived == b.statistics()[queue].archived == 27
    groups = await conn.execute("XINFO", "GROUPS", Keyspace(queue).completions)
    assert sorted(dict(zip(g[::2], g[1::2], strict=True))[b"name"].decode() for g in groups) == (
        sorted([a.group, b.group])
    )


async def _no_pending(conn: echomq.Connection, queue: str) -> bool:
    return await pending(conn, queue) == 0


async def test_two_archivers_of_one_store_share_the_work_and_store_nothing_twice(
    redis_url: str, conn: echomq.Connection, queue: str, store_url: str
) -> None:
    """Two consumers of the store's one group: each entry is archived by one of them."""
    open_store(store_url).close()
    with trio.fail_after(30):
        async with (
            archiving(redis_url, [queue], store_url, consumer="one") as a,
            archiving(redis_url, [queue], store_url, consumer="two") as b,
        ):
            assert a.group == b.group == group_name(store_url)
            await xadd_jobs(conn, queue, 300)
            await until(lambda: _stored_is(store_url, queue, 300))
            await until(lambda: _no_pending(conn, queue))
    sa, sb = a.statistics()[queue], b.statistics()[queue]
    assert sa.archived + sb.archived == 300 and sa.duplicates == sb.duplicates == 0
    names = {c.name for c in await consumers(conn, queue, a.group)}
    assert names == {"one", "two"}
    page = await history(store_url, queue, limit=1000)
    assert len({j.id for j in page.jobs}) == len(page.jobs) == 300


async def test_two_archiver_processes_on_one_host_have_their_own_names(
    redis_url: str, conn: echomq.Connection, queue: str, sqlite_url: str, tmp_path: Path
) -> None:
    """``echomq archive`` twice with no --consumer: ``<host>:<pid>`` each, no warning."""
    open_store(sqlite_url).close()
    logs = [tmp_path / "one.log", tmp_path / "two.log"]
    async with _processes(redis_url, queue, sqlite_url, logs) as procs:
        with trio.fail_after(30):
            await until(lambda: _consumers_are(conn, queue, sqlite_url, 2), within=20)
            await xadd_jobs(conn, queue, 40)
            await until(lambda: _stored_is(sqlite_url, queue, 40), within=20)
        names = {c.name for c in await consumers(conn, queue, group_name(sqlite_url))}
        assert names == {f"{HOST}:{p.pid}" for p in procs}
    for log in logs:
        assert "was active in group" not in log.read_text(), log.read_text()


async def _consumers_are(conn: echomq.Connection, queue: str, url: str, n: int) -> bool:
    return len(await consumers(conn, queue, group_name(url))) == n


@asynccontextmanager
async def _processes(
    redis_url: str, queue: str, store_url: str, logs: list[Path]
) -> AsyncIterator[list[trio.Process]]:
    procs = []
    try:
        for log in logs:
            command = [
                sys.executable, "-m", "echomq", "archive", "--url", redis_url,
                "--queue", queue, "--to", store_url + "?timeout=30",
            ]  # fmt: skip
            with open(log, "wb") as out:  # noqa: ASYNC230 - a local file, before the child
                procs.append(
                    await trio.lowlevel.open_process(command, stdout=out, stderr=subprocess.STDOUT)
                )
        yield procs
    finally:
        for proc in procs:
            if proc.returncode is None:
                proc.send_signal(signal.SIGTERM)
        with trio.move_on_after(10):
            for proc in procs:
                await proc.wait()
        for proc in procs:
            if proc.returncode is None:
                proc.kill()


async def test_a_consumer_name_already_active_is_warned_of(
    redis_url: str,
    conn: echomq.Connection,
    queue: str,
    sqlite_url: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, logger="echomq.archive")
    with trio.fail_after(20):
        async with archiving(redis_url, [queue], sqlite_url, consumer="same"):
            await until(lambda: _consumers_are(conn, queue, sqlite_url, 1))
            assert "was active in group" not in caplog.text
            async with archiving(redis_url, [queue], sqlite_url, consumer="same"):
                pass
    assert "consumer 'same' was active in group" in caplog.text
    assert "give each a --consumer of its own" in caplog.text


async def test_idle_consumers_holding_nothing_are_forgotten(
    conn: echomq.Connection, queue: str
) -> None:
    """A consumer with nothing pending goes; one that holds entries stays (its entries
    would leave the group with it)."""
    key, group = Keyspace(queue).completions, "g"
    await conn.execute("XGROUP", "CREATE", key, group, "0", "MKSTREAM")
    await xadd_jobs(conn, queue, 2)
    await conn.execute("XREADGROUP", "GROUP", group, "holds", "COUNT", 1, "STREAMS", key, ">")
    for name in ("idle", "me"):
        await conn.execute("XGROUP", "CREATECONSUMER", key, group, name)
    await until(lambda: _all_idle(conn, queue, group))
    gone = await forget_idle_consumers(conn, queue, group, keep="me", idle_s=0.0)
    assert gone == ["idle"]
    assert {c.name for c in await consumers(conn, queue, group)} == {"holds", "me"}


async def _all_idle(conn: echomq.Connection, queue: str, group: str) -> bool:
    return all(c.idle_ms > 0 for c in await consumers(conn, queue, group))


# -- the move from the one group ----------------------------------------------------------------


async def test_the_stores_group_starts_where_the_legacy_group_stood(
    redis_url: str,
    conn: echomq.Connection,
    queue: str,
    store_url: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """An archiver of an older echomq read 8 of 12 entries in the group ``archive``,
    stored them, acknowledged the first 5. The store's new group starts at the 6th: the 3
    pending come again (kept once), the 4 never read are archived, the 5 acknowledged are
    not read again."""
    caplog.set_level(logging.WARNING, logger="echomq.archive")
    key = Keyspace(queue).completions
    await conn.execute("XGROUP", "CREATE", key, LEGACY_GROUP, "0", "MKSTREAM")
    ids = await xadd_jobs(conn, queue, 12)
    reply = await conn.execute(
        "XREADGROUP", "GROUP", LEGACY_GROUP, "old", "COUNT", 8, "STREAMS", key, ">"
    )
    store = open_store(store_url)
    assert store.write([parse_entry(queue, i.decode(), f) for i, f in reply[0][1]]) == 8
    store.close()
    await conn.execute("XACK", key, LEGACY_GROUP, *ids[:5])
    with trio.fail_after(20):
        async with archiving(redis_url, [queue], store_url) as archiver:
            await until(lambda: _stored_is(store_url, queue, 12))
            await until(lambda: _group_done(conn, queue, archiver.group))
            s = archiver.statistics()[queue]
    assert (s.archived, s.duplicates) == (4, 3)
    assert f"made where the group '{LEGACY_GROUP}' stood ({_before(ids[5])}" in caplog.text
    assert await pending(conn, queue, LEGACY_GROUP) == 3  # the old group is left as it was


async def test_without_a_legacy_group_the_stores_group_reads_the_whole_stream(
    redis_url: str, conn: echomq.Connection, queue: str, sqlite_url: str
) -> None:
    await xadd_jobs(conn, queue, 5)
    with trio.fail_after(20):
        async with archiving(redis_url, [queue], sqlite_url) as archiver:
            await until(lambda: _stored_is(sqlite_url, queue, 5))
            assert archiver.statistics()[queue].duplicates == 0


async def _group_done(conn: echomq.Connection, queue: str, group: str) -> bool:
    return await pending(conn, queue, group) == 0


def _before(stream_id: str) -> str:
    ms, seq = stream_id.split("-")
    return f"{ms}-{int(seq) - 1}" if int(seq) else f"{int(ms) - 1}-18446744073709551615"


# -- the command ------------------------------------------------------------------------------


async def test_archive_with_a_group_of_its_own_and_of_a_queue_not_yet_made(
    redis_url: str, conn: echomq.Connection, queue: str, sqlite_url: str, tmp_path: Path
) -> None:
    """--group names the group; a queue that does not exist yet is archived all the same
    (a worker may start after the archive), with a warning in case the name is a typo."""
    log = tmp_path / "archive.log"
    command = [
        sys.executable, "-m", "echomq", "archive", "--url", redis_url, "--queue", queue,
        "--to", sqlite_url, "--group", "billing-archive",
    ]  # fmt: skip
    with open(log, "wb") as out:  # noqa: ASYNC230 - a local file, before the child starts
        proc = await trio.lowlevel.open_process(command, stdout=out, stderr=subprocess.STDOUT)
    try:
        with trio.fail_after(30):
            await until(lambda: _consumers_in(conn, queue, "billing-archive"), within=20)
            assert not await admin.queue_exists(conn, queue)
            await finish_jobs(conn, queue, 3)
            await until(lambda: _stored_is(sqlite_url, queue, 3), within=20)
    finally:
        proc.send_signal(signal.SIGTERM)
        with trio.fail_after(10):
            assert await proc.wait() == 0
    text = log.read_text()
    assert f"there is no queue '{queue}' yet" in text and "billing-archive" in text


async def _consumers_in(conn: echomq.Connection, queue: str, group: str) -> bool:
    return bool(await consumers(conn, queue, group))


async def test_archive_refuses_a_bad_group_name(redis_url: str, sqlite_url: str) -> None:
    with trio.fail_after(30):
        proc = await trio.run_process(
            [sys.executable, "-m", "echomq", "archive", "--url", redis_url, "--queue", "q",
             "--to", sqlite_url, "--group", "two words"],
            capture_stdout=True, capture_stderr=True, check=False,
        )  # fmt: skip
    assert proc.returncode == 2 and "consumer group" in proc.stderr.decode()
