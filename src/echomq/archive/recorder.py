"""The recording consumer: completions streams -> the durable archive, losing nothing.

``serve_archive(url, queues, store_url)`` runs one task per queue, each with a connection
of its own (its reads block), in the store's own consumer group on each stream
(``archive/groups.py``: ``archive:sqlite:<host>:<path>``, ``archive:postgresql:...``).

Rule 1 (commit, then acknowledge): a slice (one XREADGROUP, at most ``batch`` entries) is
written to the store in one transaction, and XACKed only after the commit. A crash
between the two re-delivers the slice; the store keeps each job once (docs/results.md).
Rule 2 (recovery first): at start and after every reconnect, the task re-reads its own
pending entries (XREADGROUP from id 0) and takes over entries another consumer has held
longer than ``claim_idle`` (XAUTOCLAIM) before it reads new ones.
Rule 3 (the stream is the buffer): while the store is unreachable the slice is retried
with backoff and jitter and nothing is acknowledged, so the entries wait in the stream;
a probe warns when the oldest of them nears the stream's trim horizon, and reports
entries that were trimmed before the archive had them (lost, counted and logged).
Rule 4 (never a crash on data): a corrupt entry, or one the store refuses, is logged,
counted and acknowledged (skipped); Redis and store outages are retried forever.
The archive never trims the stream: the scripts do (``MINID ~`` / ``MAXLEN ~``).
"""

from __future__ import annotations

import logging
import math
import random
from collections.abc import Sequence

import attrs
import trio

from .._model.completion import CorruptEntry, FinishedJob, parse_entry
from .._scripts.keyspace import check_queue
from .._wire.connection import Connection
from .._wire.dial import connect
from ..admin import queue_exists
from ..completions import (
    Backlog,
    GroupMissing,
    StreamEntry,
    group_ack,
    group_autoclaim,
    group_read,
    stream_backlog,
)
from ..errors import ConnectionLost, InvalidArgument, ServerError
from .groups import (
    FORGET_IDLE_S,
    LEGACY_GROUP,
    check_group_name,
    consumers,
    create_group,
    default_consumer,
    forget_idle_consumers,
    group_name,
)
from .store import (
    EntryRejected,
    Store,
    StoreUnavailable,
    display_url,
    open_store,
    store_kind,
)

__all__ = [
    "ArchiveConfig",
    "ArchiveStatistics",
    "Archiver",
    "serve_archive",
]

log = logging.getLogger("echomq.archive")

DEFAULT_RETENTION = 24 * 3600.0  # the scripts' default time retention of the stream


_MAX_SECONDS = 2**40 / 1000  # the scripts' cap on milliseconds (MAX_MS), in seconds


def _positive(instance: object, attribute: attrs.Attribute[float], value: float) -> None:
    if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
        raise InvalidArgument(f"{attribute.name} must be a positive number, not {value!r}")
    if not math.isfinite(value):
        raise InvalidArgument(f"{attribute.name} must be finite, not {value!r}")
    if value > _MAX_SECONDS:  # (as milliseconds, the commands' unit, it must fit 2^40)
        raise InvalidArgument(
            f"{attribute.name} must be at most {_MAX_SECONDS:.0f} seconds, not {value!r}"
        )


def _positive_int(instance: object, attribute: attrs.Attribute[int], value: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise InvalidArgument(f"{attribute.name} must be a positive int, not {value!r}")


def _optional_positive_int(
    instance: object, attribute: attrs.Attribute[int | None], value: int | None
) -> None:
    if value is not None:
        _positive_int(instance, attribute, value)  # type: ignore[arg-type]


def _fraction(instance: object, attribute: attrs.Attribute[float], value: float) -> None:
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value <= 1:
        raise InvalidArgument(f"{attribute.name} must be in (0, 1], not {value!r}")


@attrs.frozen(kw_only=True)
class ArchiveConfig:
    """How the recording consumer reads, retries and warns (seconds, except counts).

    A slice is ``batch`` entries; while reads come back full (a backlog) the next one asks
    for twice as many, up to ``max_batch`` (at least ``batch``), so that a slow store (a
    slow fsync) costs one commit per larger slice when the archive must catch up.
    ``retention`` and ``max_len`` describe the stream's trimming (the scripts' ``MINID``
    age and ``MAXLEN`` guard) so the archive can warn, at ``warn_fraction`` of either,
    that unarchived entries approach the trim horizon; ``max_len=None`` skips the length
    check. Every value is checked when the config is made (``InvalidArgument``).
    """

    batch: int = attrs.field(default=500, validator=_positive_int)
    max_batch: int = attrs.field(default=5000, validator=_positive_int)
    block: float = attrs.field(default=2.0, validator=_positive)
    retention: float = attrs.field(default=DEFAULT_RETENTION, validator=_positive)
    max_len: int | None = attrs.field(default=None, validator=_optional_positive_int)
    warn_fraction: float = attrs.field(default=0.75, validator=_fraction)
    claim_idle: float = attrs.field(default=60.0, validator=_positive)
    probe_interval: float = attrs.field(default=10.0, validator=_positive)
    max_backoff: float = attrs.field(default=30.0, validator=_positive)


@attrs.frozen(kw_only=True)
class ArchiveStatistics:
    """One queue's counters since the archive started (a snapshot).

    ``archived``: jobs newly stored; ``duplicates``: entries the store already had (a
    re-delivery); ``corrupt`` / ``rejected``: entries skipped (unreadable / refused by the
    store); ``lost``: entries known to be trimmed before they were archived;
    ``store_retries`` / ``redis_errors``: failed attempts; ``backlog``: the last probe.
    """

    queue: str
    archived: int = 0
    duplicates: int = 0
    corrupt: int = 0
    rejected: int = 0
    lost: int = 0
    slices: int = 0
    store_retries: int = 0
    redis_errors: int = 0
    backlog: Backlog | None = None


@attrs.define
class _Counters:
    archived: int = 0
    duplicates: int = 0
    corrupt: int = 0
    rejected: int = 0
    lost: int = 0
    slices: int = 0
    store_retries: int = 0
    redis_errors: int = 0
    backlog: Backlog | None = None
    lost_seen: int = 0  # the probe's last lower bound of unread entries trimmed
    horizon_warned_at: float = -math.inf


def _delay(attempt: int, cap: float) -> float:
    """Exponential backoff from 50 ms, capped, with jitter (half to all of the step)."""
    step = min(cap, 0.05 * 2.0 ** min(attempt, 20))
    return step * random.uniform(0.5, 1.0)


class _StoreHandle:
    """The store, opened on first use and called from one thread at a time."""

    def __init__(self, url: str) -> None:
        self.url = url
        self._store: Store | None = None
        self._lock = trio.Lock()

    async def write(self, jobs: Sequence[FinishedJob]) -> int:
        async with self._lock:
            if self._store is None:
                self._store = await trio.to_thread.run_sync(open_store, self.url)
            store = self._store
            return await trio.to_thread.run_sync(store.write, jobs)

    async def open_early(self) -> None:
        """Open the store now if it can be: an unusable store (a newer schema, no driver)
        stops the archive at once; an unreachable one is retried when a slice comes."""
        async with self._lock:
            if self._store is None:
                try:
                    self._store = await trio.to_thread.run_sync(open_store, self.url)
                except StoreUnavailable as exc:
                    log.warning("archive store unavailable at start (%s): retried per slice", exc)

    async def close(self) -> None:
        with trio.CancelScope(shield=True):
            async with self._lock:
                if self._store is not None:
                    await trio.to_thread.run_sync(self._store.close)
                    self._store = None


class Archiver:
    """Runs the recording consumer of several queues; see :func:`serve_archive`."""

    def __init__(
        self,
        url: str,
        queues: Sequence[str],
        store_url: str,
        *,
        consumer: str | None = None,
        group: str | None = None,
        config: ArchiveConfig | None = None,
    ) -> None:
        if isinstance(queues, str):
            raise InvalidArgument("queues must be a list of queue names, not a str")
        names = [check_queue(q) for q in queues]
        if not names:
            raise InvalidArgument("the archive needs at least one queue")
        if len(set(names)) != len(names):
            raise InvalidArgument(f"a queue is named twice: {names}")
        store_kind(store_url)  # a bad URL is refused before any I/O
        if consumer is not None and (not isinstance(consumer, str) or not consumer):
            raise InvalidArgument("consumer must be a non-empty str")
        self.url = url
        self.queues = names
        self.store_url = store_url
        self.group = check_group_name(group) if group is not None else group_name(store_url)
        self.consumer = consumer or default_consumer()
        self.config = config or ArchiveConfig()
        self._store = _StoreHandle(store_url)
        self._counters = {q: _Counters() for q in names}

    def statistics(self) -> dict[str, ArchiveStatistics]:
        """A snapshot of every queue's counters."""
        return {
            q: ArchiveStatistics(
                queue=q,
                **{
                    f.name: getattr(c, f.name)
                    for f in attrs.fields(ArchiveStatistics)
                    if f.name != "queue"
                },
            )
            for q, c in self._counters.items()
        }

    async def serve(
        self, *, task_status: trio.TaskStatus[Archiver] = trio.TASK_STATUS_IGNORED
    ) -> None:
        """Archive until cancelled; started once every queue's consumer group exists (so
        every job finished from then on will be archived), before any backlog is read."""
        log.info(
            "archiving %s into %s in group %r as consumer %r",
            ", ".join(self.queues), display_url(self.store_url), self.group, self.consumer,
        )  # fmt: skip
        try:
            await self._store.open_early()
            async with trio.open_nursery() as nursery:
                for queue in self.queues:
                    await nursery.start(self._serve_queue, queue)
                task_status.started(self)
        finally:
            await self._store.close()

    async def _serve_queue(self, queue: str, *, task_status: trio.TaskStatus[None]) -> None:
        counters = self._counters[queue]
        config = self.config
        block_ms = max(1, round(config.block * 1000))
        started = False
        attempt = 0
        count = config.batch
        async with connect(self.url) as conn:
            recover = True
            next_probe = next_claim = 0.0
            while True:
                try:
                    if recover:
                        await self._make_group(conn, queue)
                        if not started:  # the group exists: what is finished from now on is kept
                            await self._look_around(conn, queue)
                            started = True
                            task_status.started()
                        await self._recover(conn, queue)
                        recover, attempt = False, 0
                        now = trio.current_time()
                        next_probe, next_claim = (
                            now + config.probe_interval,
                            now + config.claim_idle,
                        )
                    now = trio.current_time()
                    if now >= next_probe:
                        await self._probe(conn, queue)
                        next_probe = now + config.probe_interval
                    if now >= next_claim:
                        await self._autoclaim(conn, queue)
                        next_claim = now + config.claim_idle
                    entries: list[StreamEntry] = []
                    with trio.move_on_after(config.block + 10.0) as guard:
                        entries = await group_read(
                            conn, queue, self.group, self.consumer,
                            count=count, block_ms=block_ms,
                        )  # fmt: skip
                    if guard.cancelled_caught:  # a half-open socket: no reply to a BLOCK read
                        conn.drop()
                        raise ConnectionLost("no reply to a blocking read")
                    if entries:
                        await self._settle(conn, queue, entries)
                    full = len(entries) >= count
                    count = (
                        max(config.batch, min(count * 2, config.max_batch))
                        if full
                        else config.batch
                    )
                except GroupMissing:
                    log.warning("the completions stream of %s is gone: group made again", queue)
                    recover = True
                except (ConnectionLost, ServerError) as exc:
                    counters.redis_errors += 1
                    attempt += 1
                    delay = _delay(attempt, config.max_backoff)
                    log.warning("archive of %s: Redis: %s; again in %.2f s", queue, exc, delay)
                    recover = True
                    await trio.sleep(delay)

    async def _make_group(self, conn: Connection, queue: str) -> None:
        made = await create_group(conn, queue, self.group)
        if made.inherited:
            log.warning(
                "archive of %s: group %r made where the group %r stood (%s, less its "
                "pending entries): nothing is skipped or read twice; remove %r once no "
                "archiver of an older echomq reads it",
                queue, self.group, LEGACY_GROUP, made.at, LEGACY_GROUP,
            )  # fmt: skip
        elif made.created:
            log.info("archive of %s: group %r made at the stream's start", queue, self.group)

    async def _look_around(self, conn: Connection, queue: str) -> None:
        """At start: warn of a missing queue and of a consumer name in use; forget the
        consumers earlier processes left idle (archive/groups.py, Rule 3)."""
        if not await queue_exists(conn, queue):
            log.warning(
                "archive of %s: there is no queue %r yet (no worker or producer has used "
                "it): archiving what it will finish; check the name if that is a typo",
                queue, queue,
            )  # fmt: skip
        claim_idle_ms = self.config.claim_idle * 1000
        for c in await consumers(conn, queue, self.group):
            if c.name == self.consumer and c.idle_ms < claim_idle_ms:
                log.warning(
                    "archive of %s: consumer %r was active in group %r %.1f s ago: another "
                    "archiver has this name (give each a --consumer of its own), or this "
                    "one restarted within --claim-idle",
                    queue, self.consumer, self.group, c.idle_ms / 1000,
                )  # fmt: skip
        idle_s = max(FORGET_IDLE_S, 10 * self.config.claim_idle)
        gone = await forget_idle_consumers(
            conn, queue, self.group, keep=self.consumer, idle_s=idle_s
        )
        if gone:
            log.info(
                "archive of %s: removed %d idle consumers holding nothing from group %r: %s",
                queue, len(gone), self.group, ", ".join(gone[:5]),
            )  # fmt: skip

    async def _recover(self, conn: Connection, queue: str) -> None:
        """Report losses; settle our own pending entries, then a dead consumer's."""
        await self._probe(conn, queue)
        after = "0"
        while True:
            entries = await group_read(
                conn, queue, self.group, self.consumer, count=self.config.batch, after=after
            )
            if not entries:
                break
            await self._settle(conn, queue, entries)
            after = entries[-1].id
        await self._autoclaim(conn, queue)

    async def _autoclaim(self, conn: Connection, queue: str) -> None:
        counters = self._counters[queue]
        start = "0-0"
        while True:
            page = await group_autoclaim(
                conn, queue, self.group, self.consumer,
                min_idle_ms=round(self.config.claim_idle * 1000), start=start,
                count=self.config.batch,
            )  # fmt: skip
            if page.deleted:
                counters.lost += len(page.deleted)
                log.error(
                    "archive of %s: %d entries were trimmed from the stream before they were "
                    "archived (a consumer held them too long): %s",
                    queue, len(page.deleted), _first(page.deleted),
                )  # fmt: skip
            if page.entries:
                await self._settle(conn, queue, page.entries)
            if page.next == "0-0":
                return
            start = page.next

    async def _probe(self, conn: Connection, queue: str) -> Backlog:
        """Read the backlog; warn near the trim horizon; report entries trimmed unread."""
        counters, config = self._counters[queue], self.config
        backlog = await stream_backlog(conn, queue, self.group)
        counters.backlog = backlog
        lost = backlog.lost_unread
        if lost > counters.lost_seen:
            counters.lost += lost - counters.lost_seen
            log.error(
                "archive of %s: at least %d entries were trimmed from the stream before the "
                "archive read them: it lagged past the stream's retention",
                queue, lost - counters.lost_seen,
            )  # fmt: skip
        counters.lost_seen = lost
        oldest = backlog.oldest_unfinished_ms
        near = []
        if oldest is not None:
            age = max(0, backlog.server_ms - oldest) / 1000
            if age >= config.warn_fraction * config.retention:
                near.append(
                    f"its oldest unarchived entry is {age:.0f} s old and the stream keeps "
                    f"{config.retention:.0f} s"
                )
        if config.max_len is not None and backlog.length >= config.warn_fraction * config.max_len:
            near.append(f"the stream holds {backlog.length} entries of at most ~{config.max_len}")
        now = trio.current_time()
        if near and now - counters.horizon_warned_at >= 60:
            counters.horizon_warned_at = now
            log.warning(
                "archive of %s is behind (%d entries not yet archived): %s: entries will be "
                "trimmed before they are archived unless it catches up",
                queue, backlog.unfinished, "; ".join(near),
            )  # fmt: skip
        return backlog

    async def _settle(self, conn: Connection, queue: str, entries: Sequence[StreamEntry]) -> None:
        """Store a slice (retrying until the store takes it), then acknowledge all of it."""
        counters = self._counters[queue]
        jobs: list[FinishedJob] = []
        trimmed: list[str] = []
        corrupt: list[tuple[str, CorruptEntry]] = []
        for entry in entries:
            if entry.fields is None:
                trimmed.append(entry.id)
                continue
            try:
                jobs.append(parse_entry(queue, entry.id, entry.fields))
            except CorruptEntry as exc:
                corrupt.append((entry.id, exc))
        # one line per slice, whatever its size: a count and the first ids
        if trimmed:
            counters.lost += len(trimmed)
            log.error(
                "archive of %s: %d entries were trimmed before they were archived: %s",
                queue, len(trimmed), _first(trimmed),
            )  # fmt: skip
        if corrupt:
            counters.corrupt += len(corrupt)
            log.error(
                "archive of %s: skipped %d corrupt entries: %s",
                queue, len(corrupt), _first([f"{i} ({why})" for i, why in corrupt]),
            )  # fmt: skip
        if jobs:
            inserted, rejected = await self._store_slice(conn, queue, jobs)
            counters.archived += inserted
            again = len(jobs) - inserted - rejected
            if again:
                counters.duplicates += again
                log.info(
                    "archive of %s: %d re-delivered entries were archived already", queue, again
                )
        await group_ack(conn, queue, self.group, [entry.id for entry in entries])
        counters.slices += 1

    async def _store_slice(
        self, conn: Connection, queue: str, jobs: Sequence[FinishedJob]
    ) -> tuple[int, int]:
        """Write ``jobs`` (one transaction); answer (new, refused). A job the store refuses
        is skipped: the slice is then written one job at a time."""
        try:
            return await self._write(conn, queue, jobs), 0
        except EntryRejected:
            pass
        inserted = 0
        refused: list[tuple[FinishedJob, EntryRejected]] = []
        for job in jobs:
            try:
                inserted += await self._write(conn, queue, [job])
            except EntryRejected as exc:
                refused.append((job, exc))
        if refused:  # one line for the slice
            self._counters[queue].rejected += len(refused)
            first, why = refused[0]
            log.error(
                "archive of %s: skipped %d jobs the store refused: %s (first: attempt %d: %s)",
                queue, len(refused), _first([j.id for j, _ in refused]), first.attempts, why,
            )  # fmt: skip
        return inserted, len(refused)

    async def _write(self, conn: Connection, queue: str, jobs: Sequence[FinishedJob]) -> int:
        """The store's write, retried with backoff while the store is unavailable.

        EntryRejected and other ArchiveErrors (an unusable store) propagate."""
        counters = self._counters[queue]
        attempt = 0
        first_failure = last_report = 0.0
        while True:
            try:
                inserted = await self._store.write(jobs)
            except StoreUnavailable as exc:
                counters.store_retries += 1
                now = trio.current_time()
                backlog = await self._probe(conn, queue)
                if attempt == 0 or now - last_report >= 60:
                    first_failure = first_failure if attempt else now
                    last_report = now
                    log.warning(
                        "archive of %s: store unavailable%s (%s); %d entries wait in the stream",
                        queue, f" for {now - first_failure:.0f} s" if attempt else "", exc,
                        backlog.unfinished,
                    )  # fmt: skip
                attempt += 1
                await trio.sleep(_delay(attempt, self.config.max_backoff))
                continue
            if attempt:
                log.warning(
                    "archive of %s: store back after %.1f s (%d attempts)",
                    queue, trio.current_time() - first_failure, attempt,
                )  # fmt: skip
            return inserted


def _first(ids: Sequence[str], shown: int = 5) -> str:
    """The first ``shown`` ids, and how many more (a log line stays one line)."""
    more = f" and {len(ids) - shown} more" if len(ids) > shown else ""
    return ", ".join(ids[:shown]) + more


async def serve_archive(
    url: str,
    queues: Sequence[str],
    store_url: str,
    *,
    consumer: str | None = None,
    group: str | None = None,
    config: ArchiveConfig | None = None,
    task_status: trio.TaskStatus[Archiver] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Archive the completions streams of ``queues`` (Redis at ``url``) into ``store_url``.

    Runs until cancelled. ``await nursery.start(serve_archive, ...)`` answers the
    :class:`Archiver` (its ``statistics()``) once every queue's consumer group exists: from
    then on every finished job will be archived (a store that is down does not hold up
    the start; the entries wait in the stream).

    Args:
        url: the Redis URL (as for :func:`echomq.connect`).
        queues: queue names; each gets its own task and connection.
        store_url: ``sqlite:///path.db`` (or a path) or ``postgresql://...``.
        consumer: this archiver's name in the group (default ``<host>:<pid>``). A
            restart under another name leaves its pending entries to XAUTOCLAIM (after
            ``claim_idle``); one under the same name re-reads them at once.
        group: the consumer group (default: the store's own, ``archive/groups.py``).
            Archivers of one store share a group; each store needs its own.
        config: batch size, waits, retention and warning knobs (:class:`ArchiveConfig`).

    Raises:
        InvalidKey: a bad queue name (before any I/O).
        InvalidArgument: a bad store URL, an empty queue list (before any I/O).
        ArchiveError: the store is unusable (a newer schema, a missing driver).
    """
    archiver = Archiver(url, queues, store_url, consumer=consumer, group=group, config=config)
    await archiver.serve(task_status=task_status)
