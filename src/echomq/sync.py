"""The blocking side: enqueue, wait for results, cancel and operate queues from code that
is not async (Django, Flask, scripts, a REPL).

Tasks have blocking twins (``send.delay_sync(...)`` answers a ``TaskHandle`` whose
``result_sync()``, ``cancel_sync()`` and ``info_sync()`` block); this module is what they
run on, and a connection for the verbs::

    with echomq.sync.connect("redis://127.0.0.1:6379/0") as mq:
        job_id = mq.enqueue("emails", b'{"to": "a@b.c"}', priority=1)
        info = mq.get_job("emails", job_id)
        mq.pause("emails"); mq.drain("emails"); mq.stats("emails")
        mq.run(echomq.admin.dead_jobs, "emails", limit=5)   # any verb, blocking

Rule 1 (one copy of every verb): every method runs the verb itself, the same coroutine the
trio and asyncio callers await, on a connection whose commands block instead of suspending
(``_wire/drivers/blocking.py``, ``run_sync``). Nothing here knows a key name or a script's
argv.
Rule 2: bad input raises before any I/O, exactly as in the trio verbs.
Rule 3: no command is replayed. redis-py's retries are off (a script may have run before a
connection dropped); a dropped or unreachable server raises
:class:`~echomq.errors.ConnectionLost`, and the next call connects again. A refusal that
says the command did not run (``LOADING``, ``BUSY``, ``TRYAGAIN``, ``CLUSTERDOWN``, a
script's "non local key" while its cluster slot moves) is sent again with backoff within
``connect_timeout``, as on the trio wire; then :class:`~echomq.errors.Unavailable`
(transient, ``errors.TRANSIENT``).
Rule 4 (waiting cannot miss): :meth:`SyncConnection.wait_outcome` reads the row, then the
queue's completions stream from where the row was read, with a blocking ``XREAD`` of its
own (the waiters' core of ``echomq.results.ResultFeed``, ``_client/waiting.py``, with one
waiter; docs/results.md). No pub/sub, no polling.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Coroutine, Sequence
from types import TracebackType
from typing import Any, TypeVar

import redis
from redis.cluster import RedisCluster

from . import admin, cancel, jobs
from ._client.waiting import BLOCK, Outcome, Waiter, Waiters, check_rows, first_read
from ._model.job import JobInfo
from ._scripts.calls import sync_errors
from ._wire.drivers.blocking import BlockingConnection, run_sync
from ._wire.drivers.redispy import make_client as make_client
from .cancel import CancelOutcome
from .config import ConnectionConfig, parse_url, resolve_url
from .errors import InvalidArgument
from .jobs.lifecycle import NewJob
from .jobs.lifecycle import enqueue_many as _enqueue_many

__all__ = ["NewJob", "SyncConnection", "connect", "make_client"]

T = TypeVar("T")


class SyncConnection:
    """A blocking producer. Open one with :func:`connect`; safe to share between threads.

    No I/O happens until the first call.
    """

    def __init__(self, config: ConnectionConfig) -> None:
        if config.ssl_context is not None:  # before any I/O
            raise InvalidArgument("echomq.sync cannot use an ssl_context; use the ssl_* settings")
        self.config = config
        # one server: its client made now (redis-py connects on first use); a cluster's
        # on first use, when it reads the layout
        self.connection = BlockingConnection(config)

    @property
    def client(self) -> redis.Redis | RedisCluster:
        """The redis-py client, made on first use (a cluster's reads its layout then)."""
        with sync_errors():
            return self.connection.client

    def run(self, verb: Callable[..., Coroutine[Any, Any, T]], *args: Any, **kwargs: Any) -> T:
        """Run any verb blocking: ``mq.run(echomq.admin.drain, "emails")`` is
        ``await echomq.admin.drain(conn, "emails")`` (rule 1).

        Raises:
            Whatever the verb raises (typed errors from :mod:`echomq.errors`).
        """
        return run_sync(verb(self.connection, *args, **kwargs))

    def enqueue(
        self,
        queue: str,
        payload: bytes | str,
        *,
        job_id: str | None = None,
        delay_ms: int = 0,
        priority: int = 0,
        max_attempts: int = 1,
        group: str | None = None,
        expires_ms: int | None = None,
    ) -> str:
        """Add one job; answer its id. The blocking twin of ``echomq.jobs.enqueue``.

        Raises:
            InvalidKey, InvalidArgument, SerializationError: before any I/O.
            DuplicateJob: a row with ``job_id`` exists; nothing is written.
            ConnectionLost: the server could not be reached, or dropped the call.
        """
        return self.run(
            jobs.enqueue,
            queue,
            payload,
            job_id=job_id,
            delay_ms=delay_ms,
            priority=priority,
            max_attempts=max_attempts,
            group=group,
            expires_ms=expires_ms,
        )

    def enqueue_many(self, queue: str, jobs: Sequence[NewJob]) -> list[str]:
        """Add many jobs in one script call (all or nothing); answer their ids in order."""
        return self.run(_enqueue_many, queue, jobs)

    def get_job(self, queue: str, job_id: str) -> JobInfo | None:
        """The job's row, or None when there is none."""
        return self.run(jobs.get_job, queue, job_id)

    def wait_outcome(self, queue: str, job_id: str, timeout: float | None = None) -> Outcome | None:
        """Wait for the job's outcome (``echomq.results``, the blocking way): its row, then
        its completions entry, read with a blocking ``XREAD`` from where the row was read.
        None when the job has no row (past its retention, or removed; a removed job is
        noticed within ``GONE_CHECK`` seconds).

        Raises:
            InvalidKey: before any I/O. TimeoutError: ``timeout`` seconds passed first.
            ConnectionLost: the server could not be reached, or dropped the call.
        """
        waiters = Waiters(queue, time.monotonic)
        waiter = waiters.add(job_id, lambda: None)  # the gates, before any I/O
        deadline = None if timeout is None else time.monotonic() + timeout
        return self.run(_wait, waiters, waiter, deadline)

    def cancel(
        self, queue: str, job_id: str, reason: str | None = None, *, grace: float | None = None
    ) -> CancelOutcome:
        """Remove the job if unclaimed, signal its worker if active (``echomq.cancel.request``;
        ``grace``: seconds until its attempt is fenced, docs/runtime.md).

        Raises:
            InvalidArgument: a negative or non-finite grace (before any I/O).
            JobGone: no row. NotCancellable: the job already finished. JobLocked.
        """
        return self.run(cancel.request, queue, job_id, reason, grace=grace)

    # -- the operator verbs (echomq.admin, echomq.jobs), blocking --------------------------

    def pause(self, queue: str) -> None:
        """Stop claiming on ``queue`` (``echomq.admin.pause``). Idempotent."""
        self.run(admin.pause, queue)

    def resume(self, queue: str) -> None:
        """Claim again on ``queue`` (``echomq.admin.resume``). Idempotent."""
        self.run(admin.resume, queue)

    def is_paused(self, queue: str) -> bool:
        """Whether the claim gate of ``queue`` is set."""
        return self.run(admin.is_paused, queue)

    def stats(self, queue: str) -> admin.QueueStats:
        """Counts per state, the gate and throughput (``echomq.admin.stats``)."""
        return self.run(admin.stats, queue)

    def drain(self, queue: str, *, include_schedule: bool = False) -> int:
        """Delete the backlog; answer the number deleted (``echomq.admin.drain``)."""
        return self.run(admin.drain, queue, include_schedule=include_schedule)

    def obliterate(self, queue: str, *, force: bool = False) -> int:
        """Destroy a paused queue to its last key (``echomq.admin.obliterate_all``).

        Raises:
            NotPaused, ActiveJobs: as the verb.
        """
        return self.run(admin.obliterate_all, queue, force=force)

    def list_queues(self) -> list[str]:
        """Every queue on the server (every master of a cluster)."""
        return self.run(admin.list_queues)

    def remove_job(self, queue: str, job_id: str) -> None:
        """Remove a job from whichever set holds it (``echomq.jobs.remove_job``)."""
        self.run(jobs.remove_job, queue, job_id)

    def reprocess_job(self, queue: str, job_id: str) -> None:
        """Dead -> pending (``echomq.jobs.reprocess_job``)."""
        self.run(jobs.reprocess_job, queue, job_id)

    def get_job_logs(self, queue: str, job_id: str) -> list[str]:
        """The job's log lines, in append order."""
        return self.run(jobs.get_job_logs, queue, job_id)

    def close(self) -> None:
        """Close the client's sockets (the next call connects again)."""
        self.connection.close()

    def __enter__(self) -> SyncConnection:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


async def _wait(
    conn: BlockingConnection, waiters: Waiters, waiter: Waiter, deadline: float | None
) -> Outcome | None:
    """Rule 4's wait, one waiter on this thread's connection (``run_sync`` drives it)."""
    if await first_read(waiters, conn, waiter):
        return waiter.value()
    while True:
        left = None if deadline is None else deadline - time.monotonic()
        if left is not None and left <= 0:
            raise TimeoutError(f"job {waiter.job_id} did not finish in time")
        block = BLOCK if left is None else min(BLOCK, left)
        waiters.read(await conn.execute(*waiters.xread(max(1, round(block * 1000)))))
        if not waiter.answered:
            await check_rows(waiters, conn)  # removal writes no entry: look at the row
        if waiter.answered:
            return waiter.value()


def connect(url: str | ConnectionConfig | None = None, **options: Any) -> SyncConnection:
    """A blocking connection for ``url`` (parsed by :func:`echomq.config.parse_url`);
    default ``$ECHOMQ_URL``, else ``redis://127.0.0.1:6379/0`` (:func:`~echomq.config.resolve_url`).

    ``options`` override fields of :class:`~echomq.config.ConnectionConfig`.
    """
    if url is None:
        url = resolve_url()
    return SyncConnection(parse_url(url, **options))
