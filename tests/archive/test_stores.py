"""The stores, SQLite and PostgreSQL alike: each job once, the schema version, history."""

from __future__ import annotations

import datetime as dt
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import attrs
import pytest
import trio

from echomq._model.completion import FinishedJob, FinishState
from echomq.archive import ArchiveError, SchemaMismatch, history, open_archive
from echomq.archive.store import SCHEMA_VERSION, HistoryQuery, Store, open_store
from echomq.errors import InvalidArgument, InvalidKey


def job(i: int, **changes: object) -> FinishedJob:
    base = FinishedJob(
        queue="q",
        id=f"j{i}",
        token=1,
        state=FinishState.COMPLETED,
        finished_at=1_000 + i,
        stream_id=f"{1_000 + i}-0",
        task="t.even" if i % 2 == 0 else "t.odd",
        result=b'"ok"',
        failures=0,
        created_at=10 + i,
        claimed_at=500 + i,
    )
    return attrs.evolve(base, **changes)  # type: ignore[arg-type]


@pytest.fixture
def store(store_url: str) -> Iterator[Store]:
    s = open_store(store_url)
    yield s
    s.close()


def test_a_job_written_twice_is_stored_once(store: Store) -> None:
    """A re-delivered slice adds nothing: write answers how many were new."""
    assert store.write([job(i) for i in range(5)]) == 5
    assert store.write([job(i) for i in range(3, 8)]) == 3
    assert store.write([job(i) for i in range(8)]) == 0
    assert store.count("q") == 8 and store.count("other") == 0 and store.count() == 8


def test_every_attempt_and_every_run_of_a_reused_id_is_kept(store: Store) -> None:
    """(queue, id, attempts, created_at) is the identity: a reprocessed job's second death
    and a reused id's new run are rows of their own."""
    first = job(1, state=FinishState.DEAD, error="boom", result=None)
    again = attrs.evolve(first, token=2, finished_at=2_000, stream_id="2000-0")
    reused = attrs.evolve(first, created_at=5_000, finished_at=6_000, stream_id="6000-0")
    assert store.write([first, again, reused, first]) == 3
    rows = store.history(HistoryQuery(queue="q", job_id="j1"))
    assert [(j.token, j.created_at) for _, j in rows] == [(1, 5_000), (2, 11), (1, 11)]


def test_every_field_round_trips(store: Store) -> None:
    """Bytes results, text, missing values and unknown fields come back as written."""
    written = [
        job(1, result=b"\x00\xff binary", extra={"worker": "w1", "note": "é"}),
        job(2, state=FinishState.DEAD, result=None, error="Traceback: é", failures=3),
        job(3, state=FinishState.CANCELLED, result=None, reason="user", claimed_at=None, task=None),
        job(4, created_at=None),
    ]
    store.write(written)
    back = {j.id: j for _, j in store.history(HistoryQuery(queue="q"))}
    for original in written:
        got = back[original.id]
        assert got.archived_at is not None
        assert attrs.evolve(got, archived_at=None) == original


def test_a_newer_schema_is_refused_with_a_clear_message(store_url: str) -> None:
    """A store made by a newer echomq is not written (nor read) by this one."""
    open_store(store_url).close()
    if store_url.startswith("sqlite"):
        path = store_url.removeprefix("sqlite:///")
        with sqlite3.connect(path) as conn:
            conn.execute("UPDATE emq_archive_meta SET value = '99' WHERE name = 'schema_version'")
    else:
        import psycopg

        with psycopg.connect(store_url, autocommit=True) as conn:
            conn.execute("UPDATE emq_archive_meta SET value = '99' WHERE name = 'schema_version'")
    with pytest.raises(SchemaMismatch, match=f"schema version 99.*up to {SCHEMA_VERSION}.*upgrade"):
        open_store(store_url)


def _v1_check(store_url: str, sql: str) -> None:
    """Run ``sql`` on the store (SQLite or PostgreSQL), autocommit."""
    if store_url.startswith("sqlite"):
        with sqlite3.connect(store_url.removeprefix("sqlite:///")) as conn:
            conn.executescript(sql)
    else:
        import psycopg

        with psycopg.connect(store_url, autocommit=True) as conn:
            conn.execute(sql)


def _make_version_1(store_url: str) -> None:
    """A store as echomq's archive schema 1 made it: its state CHECK without `expired`."""
    from echomq.archive import sqlite_store
    from echomq.archive.sql import STATE_CHECK

    old_check = STATE_CHECK.replace(", 'expired'", "")
    assert old_check != STATE_CHECK
    if store_url.startswith("sqlite"):
        table = sqlite_store._CREATE.format(table="emq_finished_jobs")
        _v1_check(
            store_url,
            f"{table.replace(STATE_CHECK, old_check)};"
            "CREATE TABLE emq_archive_meta (name TEXT PRIMARY KEY, value TEXT NOT NULL);"
            "INSERT INTO emq_archive_meta VALUES ('schema_version', '1');",
        )
        s = open_store(store_url, create=False)  # a reader of version 1: as it is
    else:
        open_store(store_url).close()
        _v1_check(
            store_url,
            "ALTER TABLE emq_finished_jobs DROP CONSTRAINT emq_finished_jobs_state_check, "
            f"ADD CHECK ({old_check}); "
            "UPDATE emq_archive_meta SET value = '1' WHERE name = 'schema_version'",
        )
        s = open_store(store_url, create=False)
    try:
        assert s.write([job(1)]) == 1
        expired = job(2, state=FinishState.EXPIRED, result=None, error="expired")
        with pytest.raises(ArchiveError):  # the old CHECK refuses the new state
            s.write([expired])
    finally:
        s.close()


def _version(store_url: str) -> str:
    if store_url.startswith("sqlite"):
        with sqlite3.connect(store_url.removeprefix("sqlite:///")) as conn:
            [(value,)] = conn.execute(
                "SELECT value FROM emq_archive_meta WHERE name = 'schema_version'"
            ).fetchall()
    else:
        import psycopg

        with psycopg.connect(store_url, autocommit=True) as conn:
            [(value,)] = conn.execute(
                "SELECT value FROM emq_archive_meta WHERE name = 'schema_version'"
            ).fetchall()
    return str(value)


def test_a_version_1_store_is_migrated_by_its_first_writer(store_url: str) -> None:
    """Schema 2 adds the state `expired`: a reader leaves a store of version 1 as it is,
    the first writer that opens it migrates it (its rows kept, in their order)."""
    _make_version_1(store_url)
    assert _version(store_url) == "1"
    reader = open_store(store_url, create=False)
    try:
        assert [j.id for _, j in reader.history(HistoryQuery(queue="q"))] == ["j1"]
    finally:
        reader.close()
    assert _version(store_url) == "1"
    writer = open_store(store_url)
    try:
        assert _version(store_url) == str(SCHEMA_VERSION) == "2"
        expired = job(2, state=FinishState.EXPIRED, result=None, error="expired", claimed_at=None)
        assert writer.write([expired, job(3)]) == 2
        rows = writer.history(HistoryQuery(queue="q"))
        assert [j.id for _, j in rows] == ["j3", "j2", "j1"]
        [(_, back)] = writer.history(HistoryQuery(queue="q", state=FinishState.EXPIRED))
        assert attrs.evolve(back, archived_at=None) == expired
    finally:
        writer.close()
    open_store(store_url).close()  # migrated once: opening again changes nothing
    assert _version(store_url) == "2"


def test_reading_where_there_is_no_archive_says_so(store_url: str) -> None:
    """history never creates an archive: no file / no table is an ArchiveError."""
    with pytest.raises(ArchiveError, match=r"no archive|no echomq archive|not an echomq archive"):
        open_store(store_url, create=False)


def test_a_missing_directory_is_an_archive_error(tmp_path: Path) -> None:
    """Not retried forever as 'unavailable': the path is wrong."""
    with pytest.raises(ArchiveError, match="no directory"):
        open_store(f"sqlite:///{tmp_path}/missing/archive.db")


@pytest.mark.parametrize(
    "url", ["redis://127.0.0.1/0", "sqlite://relative.db", "sqlite:///x.db?timeout=abc", ""]
)
def test_bad_store_urls_are_refused_before_any_io(url: str) -> None:
    with pytest.raises(InvalidArgument):
        open_store(url)


async def test_history_filters_newest_first(store_url: str) -> None:
    """task, state, job id, since/until: each narrows; the order is newest first."""
    store = open_store(store_url)
    now = dt.datetime.now(dt.UTC)
    recent = int(now.timestamp() * 1000)
    store.write(
        [job(i) for i in range(6)]
        + [job(10, state=FinishState.DEAD, result=None, error="boom", finished_at=recent - 30_000)]
        + [job(11, state=FinishState.CANCELLED, result=None, reason="r", finished_at=recent)]
        + [attrs.evolve(job(0), queue="other")]
    )
    store.close()
    page = await history(store_url, "q")
    assert [j.id for j in page.jobs] == ["j11", "j10", "j5", "j4", "j3", "j2", "j1", "j0"]
    assert page.next is None
    assert [j.id for j in (await history(store_url, "q", task="t.odd")).jobs] == [
        "j11",
        "j5",
        "j3",
        "j1",
    ]
    assert [j.id for j in (await history(store_url, "q", state="dead")).jobs] == ["j10"]
    assert [j.id for j in (await history(store_url, "q", job_id="j3")).jobs] == ["j3"]
    since = await history(store_url, "q", since=dt.timedelta(minutes=1))
    assert [j.id for j in since.jobs] == ["j11", "j10"]
    window = await history(store_url, "q", since=now - dt.timedelta(minutes=1), until=now)
    assert [j.id for j in window.jobs] == ["j10"]
    assert [j.id for j in (await history(store_url, "other")).jobs] == ["j0"]


async def test_history_pages_cover_every_job_once(store_url: str) -> None:
    """Keyset paging: pages of 4 over 10 jobs (some finishing in the same ms) repeat and
    skip nothing, and a job archived meanwhile does not shift the pages."""
    store = open_store(store_url)
    store.write([job(i, finished_at=1_000 + i // 3) for i in range(10)])
    seen: list[str] = []
    before = None
    async with open_archive(store_url) as reader:
        for n in range(3):
            page = await reader.history("q", limit=4, before=before)
            seen += [j.id for j in page.jobs]
            if n == 0:  # a newer job arrives between pages
                await trio.to_thread.run_sync(store.write, [job(99, finished_at=9_999)])
            before = page.next
        assert before is None
        assert await reader.count("q") == 11
    store.close()
    assert sorted(seen) == sorted(f"j{i}" for i in range(10)) and len(seen) == 10
    finished = [1_000 + int(s[1:]) // 3 for s in seen]
    assert finished == sorted(finished, reverse=True)


@pytest.mark.parametrize(
    ("kwargs", "error"),
    [
        ({"queue": "bad name"}, InvalidKey),
        ({"state": "finished"}, InvalidArgument),
        ({"limit": 0}, InvalidArgument),
        ({"limit": 1001}, InvalidArgument),
        ({"before": "nope"}, InvalidArgument),
        ({"since": 3600}, InvalidArgument),
    ],
)
async def test_history_checks_its_arguments_before_any_io(
    kwargs: dict[str, object], error: type[Exception]
) -> None:
    """A store URL that would fail to open is never reached."""
    args: dict[str, object] = {"queue": "q", **kwargs}
    queue = args.pop("queue")
    with pytest.raises(error):
        await history("postgresql://127.0.0.1:1/none", queue, **args)  # type: ignore[arg-type]
