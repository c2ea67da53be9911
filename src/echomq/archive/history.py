"""Reading the archive: finished jobs of a queue, newest first, a page at a time.

``await history(store_url, "emails", state="dead", since=timedelta(hours=1))`` answers a
:class:`HistoryPage`; pass its ``next`` as ``before=`` for the following page (keyset
paging: a page never repeats or skips a job, however many are archived meanwhile).
``open_archive`` keeps one store open for many reads. Arguments are checked before any
I/O (``InvalidKey``, ``InvalidArgument``). "Since" and "until" are read on this machine's
clock, against the server-clock ``finished_at`` of each job.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import attrs
import trio

from .._model.completion import FinishedJob, FinishState
from .._model.spans import span_ms
from .._scripts.keyspace import check_queue
from ..errors import InvalidArgument
from .store import HistoryQuery, Store, now_ms, open_store

__all__ = [
    "ArchiveReader",
    "HistoryPage",
    "MAX_LIMIT",
    "history",
    "open_archive",
    "parse_since",
]

MAX_LIMIT = 1000


@attrs.frozen(kw_only=True)
class HistoryPage:
    """One page of finished jobs, newest first; ``next`` is the ``before=`` of the next
    page (None when this page is the last)."""

    jobs: tuple[FinishedJob, ...]
    next: str | None


def parse_since(text: str, *, now: dt.datetime | None = None) -> dt.datetime:
    """A moment from ``1h``, ``30m``, ``2d``, ``1h30m``, ``90s``, ``1w`` (that long before
    ``now``) or an ISO 8601 date/time (without an offset: UTC).

    Raises:
        InvalidArgument: neither form, or a duration reaching before year 1.
    """
    now = now or dt.datetime.now(dt.UTC)
    text = text.strip()
    total = span_ms(text)
    if total is not None:
        try:
            return now - dt.timedelta(milliseconds=total)
        except OverflowError:  # (a timedelta's days, or a datetime, out of range)
            raise InvalidArgument(
                f"{text!r} reaches back before the year 1: give a shorter duration or a date"
            ) from None
    try:
        moment = dt.datetime.fromisoformat(text)
    except ValueError:
        raise InvalidArgument(
            f"not a duration (1h, 30m, 2d, 1h30m) or an ISO date/time: {text!r}"
        ) from None
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=dt.UTC)


def _moment_ms(value: dt.datetime | dt.timedelta | None, what: str) -> int | None:
    if value is None:
        return None
    if isinstance(value, dt.timedelta):
        return now_ms() - int(value.total_seconds() * 1000)
    if isinstance(value, dt.datetime):
        aware = value if value.tzinfo is not None else value.replace(tzinfo=dt.UTC)
        return int(aware.timestamp() * 1000)
    raise InvalidArgument(f"{what} must be a datetime or a timedelta, not {value!r}")


def _cursor(text: str | None) -> tuple[int, int] | None:
    if text is None:
        return None
    finished, sep, seq = str(text).partition(".")
    if not sep or not finished.isdigit() or not seq.isdigit():
        raise InvalidArgument(f"not a history cursor (as a page's `next` gives): {text!r}")
    return int(finished), int(seq)


def make_query(
    queue: str,
    *,
    task: str | None = None,
    state: str | FinishState | None = None,
    job_id: str | None = None,
    since: dt.datetime | dt.timedelta | None = None,
    until: dt.datetime | dt.timedelta | None = None,
    limit: int = 50,
    before: str | None = None,
) -> HistoryQuery:
    """Check the arguments (no I/O) and build the store's query."""
    check_queue(queue)
    if state is not None:
        try:
            state = FinishState(state)
        except ValueError:
            raise InvalidArgument(
                f"state must be one of {', '.join(s.value for s in FinishState)}, not {state!r}"
            ) from None
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_LIMIT:
        raise InvalidArgument(f"limit must be an int in 1..{MAX_LIMIT}, not {limit!r}")
    for name, value in (("task", task), ("job_id", job_id)):
        if value is not None and not isinstance(value, str):
            raise InvalidArgument(f"{name} must be a str, not {value!r}")
    return HistoryQuery(
        queue=queue,
        task=task,
        state=state,
        job_id=job_id,
        since_ms=_moment_ms(since, "since"),
        until_ms=_moment_ms(until, "until"),
        limit=limit,
        before=_cursor(before),
    )


def _page(rows: list[tuple[int, FinishedJob]], limit: int) -> HistoryPage:
    nxt = None
    if len(rows) > limit:
        seq, job = rows[limit - 1]
        nxt = f"{job.finished_at}.{seq}"
        rows = rows[:limit]
    return HistoryPage(jobs=tuple(job for _, job in rows), next=nxt)


class ArchiveReader:
    """An open archive store, read from Trio (each read in a worker thread)."""

    def __init__(self, store: Store) -> None:
        self._store = store
        self._lock = trio.Lock()
        self.display = store.display

    async def history(
        self,
        queue: str,
        *,
        task: str | None = None,
        state: str | FinishState | None = None,
        job_id: str | None = None,
        since: dt.datetime | dt.timedelta | None = None,
        until: dt.datetime | dt.timedelta | None = None,
        limit: int = 50,
        before: str | None = None,
    ) -> HistoryPage:
        """Finished jobs of ``queue``, newest first (see :func:`history`)."""
        query = make_query(
            queue, task=task, state=state, job_id=job_id, since=since, until=until,
            limit=limit, before=before,
        )  # fmt: skip
        probe = attrs.evolve(query, limit=limit + 1)  # one more: is there a next page?
        async with self._lock:
            rows = await trio.to_thread.run_sync(self._store.history, probe)
        return _page(rows, limit)

    async def count(self, queue: str | None = None) -> int:
        """How many finished jobs the archive holds (for ``queue``, or in all)."""
        if queue is not None:
            check_queue(queue)
        async with self._lock:
            return await trio.to_thread.run_sync(self._store.count, queue)


@asynccontextmanager
async def open_archive(store_url: str, *, create: bool = False) -> AsyncIterator[ArchiveReader]:
    """Open the archive at ``store_url`` for reading.

    Raises:
        InvalidArgument: a URL of another kind (before any I/O).
        ArchiveError: no archive there (unless ``create``), a newer schema, no driver.
        StoreUnavailable: the store cannot be reached.
    """
    from .store import store_kind

    store_kind(store_url)
    store = await trio.to_thread.run_sync(lambda: open_store(store_url, create=create))
    try:
        yield ArchiveReader(store)
    finally:
        with trio.CancelScope(shield=True):
            await trio.to_thread.run_sync(store.close)


async def history(
    store_url: str,
    queue: str,
    *,
    task: str | None = None,
    state: str | FinishState | None = None,
    job_id: str | None = None,
    since: dt.datetime | dt.timedelta | None = None,
    until: dt.datetime | dt.timedelta | None = None,
    limit: int = 50,
    before: str | None = None,
) -> HistoryPage:
    """Finished jobs of ``queue`` in the archive at ``store_url``, newest first.

    Args:
        task, state, job_id: keep only jobs of this task / outcome / id.
        since, until: finished at or after ``since``, before ``until`` (a datetime, or a
            timedelta meaning that long ago).
        limit: jobs per page (1..1000).
        before: the ``next`` of the previous page.

    Raises:
        InvalidKey, InvalidArgument: bad arguments, before any I/O.
        ArchiveError / StoreUnavailable: as :func:`open_archive`.
    """
    make_query(
        queue, task=task, state=state, job_id=job_id, since=since, until=until,
        limit=limit, before=before,
    )  # fmt: skip
    async with open_archive(store_url) as reader:
        return await reader.history(
            queue, task=task, state=state, job_id=job_id, since=since, until=until,
            limit=limit, before=before,
        )  # fmt: skip
