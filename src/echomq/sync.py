"""The blocking producer: enqueue and read jobs from code that is not async.

A thin redis-py driver over the same command builders as the trio verbs
(``echomq._verbs.lifecycle``): the same keys, scripts, argument gates, reply readers and
errors. Nothing here knows a key name or a script's argv.

Rule 1: bad input raises before any I/O, exactly as in the trio verbs.
Rule 2: no command is replayed. redis-py's retries are off (a script may have run before a
connection dropped); a dropped or unreachable server raises
:class:`~echomq.errors.ConnectionLost`, and the next call connects again.
Rule 3: a refusal that says the command did not run (``LOADING``, ``BUSY``, ``TRYAGAIN``,
``CLUSTERDOWN``, a script's "non local key" while its cluster slot moves) is sent again with
backoff within ``connect_timeout``, as on the trio wire; then
:class:`~echomq.errors.Unavailable` (transient, ``errors.TRANSIENT``).

::

    with echomq.sync.connect("redis://127.0.0.1:6379/0") as mq:
        job_id = mq.enqueue("emails", b'{"to": "a@b.c"}', priority=1)
        info = mq.get_job("emails", job_id)
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from types import TracebackType
from typing import Any, TypeVar

import redis
from redis.backoff import NoBackoff
from redis.cluster import ClusterNode, RedisCluster
from redis.retry import Retry

from ._model.job import JobInfo
from ._redis.scripts import ScriptCall, evaluate_sync, retry_sync, sync_errors
from ._verbs.lifecycle import (
    NewJob,
    enqueue_call,
    enqueue_one_call,
    get_job_args,
    read_job,
)
from ._verbs.results import (
    BLOCK,
    GONE_CHECK,
    Outcome,
    entry_job_id,
    entry_outcome,
    probe_commands,
    read_probe,
    read_stream_entries,
    row_outcome,
    xread_command,
)
from .config import DEFAULT_URL, ConnectionConfig, parse_url
from .errors import InvalidArgument

__all__ = ["NewJob", "SyncConnection", "connect", "make_client"]

T = TypeVar("T")


def make_client(config: ConnectionConfig) -> redis.Redis | RedisCluster:
    """A redis-py client for ``config`` (host/port or unix socket, db, ACL user, TLS).

    RESP2 (as the trio wire speaks) and no retries (scripts are not idempotent). Raises
    InvalidArgument for an ``ssl_context`` object, which redis-py cannot take: use the
    ``ssl_*`` URL parameters instead. A ``redis+cluster://`` config answers redis-py's
    ``RedisCluster`` (it reads the layout at once: :class:`SyncConnection` makes it on
    first use); it follows MOVED/ASK itself and, with no retries, never re-sends a command
    whose connection dropped.
    """
    if config.ssl_context is not None:
        raise InvalidArgument("echomq.sync cannot use an ssl_context; use the ssl_* settings")
    options: dict[str, Any] = {
        "db": config.db,
        "username": config.username,
        "password": config.password,
        "socket_connect_timeout": config.connect_timeout,
        "client_name": config.client_name,
        "protocol": 2,
        "retry": Retry(NoBackoff(), 0),
    }
    if config.unix_path:
        return redis.Redis(unix_socket_path=config.unix_path, **options)
    if config.tls:
        options.update(
            ssl=True,
            ssl_ca_certs=config.ssl_ca_certs,
            ssl_certfile=config.ssl_certfile,
            ssl_keyfile=config.ssl_keyfile,
            ssl_cert_reqs="required" if config.ssl_verify else "none",
            ssl_check_hostname=config.ssl_verify,
        )
    if config.cluster:
        del options["db"]
        nodes = [ClusterNode(host, port) for host, port in config.cluster_nodes]  # type: ignore[no-untyped-call]
        return RedisCluster(startup_nodes=nodes, **options)
    return redis.Redis(host=config.host, port=config.port, **options)


class SyncConnection:
    """A blocking producer. Open one with :func:`connect`; safe to share between threads.

    No I/O happens until the first call.
    """

    def __init__(self, config: ConnectionConfig) -> None:
        if config.ssl_context is not None:  # (checked again by make_client) before any I/O
            raise InvalidArgument("echomq.sync cannot use an ssl_context; use the ssl_* settings")
        self.config = config
        # one server: made now (redis-py connects on first use); a cluster: on first use
        self._client = None if config.cluster else make_client(config)

    @property
    def client(self) -> redis.Redis | RedisCluster:
        """The redis-py client, made on first use (a cluster's reads its layout then)."""
        if self._client is None:
            with sync_errors():
                self._client = make_client(self.config)
        return self._client

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
    ) -> str:
        """Add one job; answer its id. The blocking twin of ``echomq.jobs.enqueue``.

        Raises:
            InvalidKey, InvalidArgument, SerializationError: before any I/O.
            DuplicateJob: a row with ``job_id`` exists; nothing is written.
            ConnectionLost: the server could not be reached, or dropped the call.
        """
        sc = enqueue_one_call(
            queue,
            payload,
            job_id=job_id,
            delay_ms=delay_ms,
            priority=priority,
            max_attempts=max_attempts,
            group=group,
        )
        return self._evaluate(sc)

    def enqueue_many(self, queue: str, jobs: Sequence[NewJob]) -> list[str]:
        """Add many jobs in one script call (all or nothing); answer their ids in order."""
        return self._evaluate(enqueue_call(queue, jobs))

    def get_job(self, queue: str, job_id: str) -> JobInfo | None:
        """The job's row, or None when there is none."""
        args = get_job_args(queue, job_id)
        client: Any = self.client  # redis-py's execute_command is untyped
        row = retry_sync(lambda: client.execute_command(*args), self.config.connect_timeout)
        return read_job(job_id, row)

    def wait_outcome(self, queue: str, job_id: str, timeout: float | None = None) -> Outcome | None:
        """Wait for the job's outcome (``echomq.results``, the blocking way): its row, then
        its completions entry, read with a blocking ``XREAD`` from where the row was read.
        None when the job has no row (past its retention, or removed; a removed job is
        noticed within ``GONE_CHECK`` seconds).

        Raises:
            InvalidKey: before any I/O. TimeoutError: ``timeout`` seconds passed first.
            ConnectionLost: the server could not be reached, or dropped the call.
        """
        get_job_args(queue, job_id)  # the gates, before any I/O
        deadline = None if timeout is None else time.monotonic() + timeout
        client: Any = self.client  # redis-py's commands are untyped
        want = job_id.encode()
        with sync_errors():
            pipe = client.pipeline(transaction=False)
            for command in probe_commands(queue, job_id):
                pipe.execute_command(*command)
            probe = read_probe(job_id, pipe.execute())
            if probe.info is None:
                return None
            outcome = row_outcome(probe.info)
            after, checked = probe.after, time.monotonic()
            while outcome is None:
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    raise TimeoutError(f"job {job_id} did not finish within {timeout} s")
                block = BLOCK if left is None else min(BLOCK, left)
                command = xread_command(
                    queue, after, count=1000, block_ms=max(1, round(block * 1000))
                )
                for stream_id, fields in read_stream_entries(client.execute_command(*command)):
                    after = stream_id
                    if entry_job_id(fields) == want:
                        outcome = entry_outcome(queue, stream_id, fields)
                if outcome is None and time.monotonic() - checked >= GONE_CHECK:
                    checked = time.monotonic()  # removal writes no entry: look at the row
                    info = self.get_job(queue, job_id)
                    if info is None:
                        return None
                    outcome = row_outcome(info)
        return outcome

    def _evaluate(self, sc: ScriptCall[T]) -> T:
        """Run a script as the trio verbs do: the sharded twin on a cluster; a transient
        refusal (not run: "non local key" or ``TRYAGAIN`` while a slot moves, ``LOADING``)
        sent again with backoff within ``connect_timeout``, then ``Unavailable``."""
        return evaluate_sync(
            self.client, sc, sharded=self.config.cluster, retry_for=self.config.connect_timeout
        )

    def close(self) -> None:
        """Close the client's sockets."""
        if self._client is not None:
            self._client.close()

    def __enter__(self) -> SyncConnection:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


def connect(url: str | ConnectionConfig = DEFAULT_URL, **options: Any) -> SyncConnection:
    """A blocking producer for ``url`` (parsed by :func:`echomq.config.parse_url`).

    ``options`` override fields of :class:`~echomq.config.ConnectionConfig`.
    """
    return SyncConnection(parse_url(url, **options))
