"""``Queue``: a named queue, its registered tasks, and its connections.

Rule 1: nothing here does I/O at construction. ``Queue(...)`` and ``@queue.task`` only
record names and options; ``async with queue.open()`` connects (trio). The asyncio side
connects on first use per event loop (``asyncio_client``), the blocking side on first use
(``sync_connection``).
Rule 2: the queue holds one connection and, at most, one reader of its completions stream
(opened the first time a ``result()`` waits, docs/results.md), shared by every handle; and
one :class:`~echomq._client.producer.Producer`, the path of every enqueue.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import inspect
import weakref
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any, Concatenate, ParamSpec, Protocol, TypeVar, cast, overload

import trio

from . import repeat as repeat_verbs
from ._client.producer import Producer, Sent
from ._model.codec import JSON, Codec, codec_named
from ._model.job import NewJob
from ._model.options import TaskOptions, build_options
from ._model.repeat import RepeatSource
from ._model.schedule import DEFAULT_GRACE_MS, MissedPolicy, Schedule, duration_ms
from ._scripts.keyspace import check_id, check_queue, check_repeat_key
from ._trio import open_service_nursery
from ._wire.connection import Connection
from ._wire.dial import connect
from ._worker.context import Job
from ._worker.hooks import Hooks
from .config import resolve_url
from .errors import InvalidArgument, InvalidKey, WrongEventLoop
from .events import EventFeed, open_event_feed
from .handle import TaskHandle
from .results import GONE_CHECK, ResultFeed
from .task import Task, wants_job

if TYPE_CHECKING:
    from .asyncio import AsyncioQueueClient
    from .sync import SyncConnection

__all__ = ["Queue", "Register"]

P = ParamSpec("P")
R = TypeVar("R")

_API: RepeatSource = "api"


def _running_asyncio_loop() -> asyncio.AbstractEventLoop:
    """The running asyncio loop, for the asyncio twins (``adelay``, ``aresult``...).

    Raises:
        WrongEventLoop: none runs; the message names the verb to use instead.
    """
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        pass
    try:
        trio.lowlevel.current_trio_token()
    except RuntimeError:
        raise WrongEventLoop(
            "the a* verbs (adelay, aapply, aresult...) are asyncio's and no asyncio loop is "
            "running: from blocking code use delay_sync(), apply_sync(), result_sync()"
        ) from None
    raise WrongEventLoop(
        "the a* verbs (adelay, aapply, aresult...) are asyncio's: under trio use delay(), "
        "apply(), result() (in `async with queue.open():`)"
    ) from None


class Register(Protocol):
    """What ``@queue.task(...)`` with options answers: the decorator, typed as the bare
    ``@queue.task`` is (a first parameter annotated ``object`` or ``Any`` reads as a
    ``Job`` one to a type checker; the worker reads the annotation itself)."""

    @overload
    def __call__(self, fn: Callable[Concatenate[Job, P], Awaitable[R]], /) -> Task[P, R]: ...

    @overload
    def __call__(self, fn: Callable[P, Awaitable[R]], /) -> Task[P, R]: ...

    @overload
    def __call__(self, fn: Callable[Concatenate[Job, P], R], /) -> Task[P, R]: ...

    @overload
    def __call__(self, fn: Callable[P, R], /) -> Task[P, R]: ...


class Queue:
    """A named queue and its registered tasks. No I/O until :meth:`open`.

    Args:
        name: the queue's name (1..128 of ``[A-Za-z0-9._~-]``).
        url: the Redis URL. None: ``$ECHOMQ_URL`` (read when the queue connects), else
            ``redis://127.0.0.1:6379/0``; a worker's ``--url`` wins over both
            (:func:`~echomq.config.resolve_url`, the one rule).
        codec: how payloads and results are encoded: ``"json"`` (the default),
            ``"msgpack"`` (``pip install 'echomq[msgpack]'``), or a ``Codec``. Producers
            and workers of one queue give the same (docs/payloads.md).

    Raises:
        InvalidArgument: an unknown codec name, or msgpack not installed.
    """

    def __init__(self, name: str, url: str | None = None, *, codec: Codec | str = JSON) -> None:
        #: the one enqueue path of this queue (gating, tracing, the trio coalescer)
        self.producer = Producer(check_queue(name), codec_named(codec))
        self._hooks = self.producer.hooks = Hooks()
        self._url = url
        self.tasks: dict[str, Task[..., Any]] = {}
        self._conn: Connection | None = None
        self._nursery: trio.Nursery | None = None
        self._feed: EventFeed | None = None
        self._feed_lock = trio.Lock()
        self._results: ResultFeed | None = None
        self.result_gone_check = GONE_CHECK  # seconds: how soon a removed job's waiter knows
        self._sync: SyncConnection | None = None  # the blocking side, made on first use
        # the asyncio side: one client (connection + stream reader) per event loop
        self._asyncio: weakref.WeakKeyDictionary[Any, AsyncioQueueClient] = (
            weakref.WeakKeyDictionary()
        )

    @property
    def hooks(self) -> Hooks:
        """The queue's hooks (docs/hooks.md): the producer's ``before_enqueue``, the
        worker's ``around_run`` and outcome hooks. Replacing it replaces the producer's too."""
        return self._hooks

    @hooks.setter
    def hooks(self, hooks: Hooks) -> None:
        if not isinstance(hooks, Hooks):
            raise InvalidArgument(f"queue.hooks must be an echomq.Hooks, not {hooks!r:.80}")
        self._hooks = self.producer.hooks = hooks

    @property
    def name(self) -> str:
        """The queue's name (the producer's: replacing it, before ``open()``, moves both)."""
        return self.producer.queue

    @name.setter
    def name(self, name: str) -> None:
        self.producer.queue = check_queue(name)

    @property
    def url(self) -> str:
        """The URL this queue connects to: its own ``url`` (given, or set since), else
        ``$ECHOMQ_URL``, else the default (:func:`~echomq.config.resolve_url`)."""
        return resolve_url(self._url)

    @url.setter
    def url(self, url: str | None) -> None:
        self._url = url

    @property
    def codec(self) -> Codec:
        """How payloads and results are encoded (the producer's)."""
        return self.producer.codec

    @codec.setter
    def codec(self, codec: Codec | str) -> None:
        self.producer.codec = codec_named(codec)

    def __repr__(self) -> str:
        return f"Queue({self.name!r}, tasks={sorted(self.tasks)})"

    # -- registration ------------------------------------------------------------------

    @overload
    def task(self, fn: Callable[Concatenate[Job, P], Awaitable[R]], /) -> Task[P, R]: ...

    @overload
    def task(self, fn: Callable[P, Awaitable[R]], /) -> Task[P, R]: ...

    @overload
    def task(self, fn: Callable[Concatenate[Job, P], R], /) -> Task[P, R]: ...

    @overload
    def task(self, fn: Callable[P, R], /) -> Task[P, R]: ...

    @overload
    def task(
        self, /, *, name: str | None = None, options: TaskOptions | None = None, **fields: Any
    ) -> Register: ...

    def task(
        self,
        fn: Callable[..., Any] | None = None,
        /,
        *,
        name: str | None = None,
        options: TaskOptions | None = None,
        **fields: Any,
    ) -> Task[Any, Any] | Register:
        """Register a coroutine function (or a plain one, run in a thread) as a task.

        The task is typed by the function (``Task[P, R]``): its calls take the function's
        parameters (less a leading ``job: echomq.Job``), and its handles' ``result()``
        answers the function's return type (of a coroutine function: what it awaits to).

        The options are :class:`~echomq.app.TaskOptions`' fields, given as keywords
        (``@queue.task(max_attempts=5, lease=30)``) or as one value
        (``options=TaskOptions(...)``; keywords given too replace its fields):

        - ``max_attempts``: handler failures allowed before the job is dead (retries =
          max_attempts - 1; at most 1,000,000). A ``Retry`` counts as a failure.
        - ``backoff``: seconds between attempts, or a callable ``failures -> seconds``
          (default: 1 s doubling, capped at 300 s). A delay that cannot be scheduled at run
          time (the callable raised, answered NaN, inf or more than ``MAX_DELAY``) makes
          the job dead with that reason.
        - ``timeout``: seconds the handler may run; past it the attempt is stopped hard
          and fails (``TimeoutError``): an async task is cancelled, a thread task
          abandoned, a process task's child killed (docs/runtime.md, "Time limits").
        - ``soft_timeout``: seconds after which ``SoftTimeLimit`` is raised inside the
          job (it may catch it and clean up); below ``timeout`` when both are given.
        - ``lease``: seconds of each lease; the worker renews it every third of that.
          Delays, leases and timeouts are at most ``MAX_DELAY`` (2^40 ms, ~34.8 years).
        - ``priority``: default priority of this task's jobs (higher runs first).
        - ``process``: run a CPU-bound plain function in the worker's process pool
          (``spawn``: a module-level function; no ``Job`` parameter; arguments and result
          cross by pickle). Each child imports the main module again: a script that runs
          its own worker (``trio.run(worker.serve)``) puts that call under ``if __name__
          == "__main__":``. Default: plain functions run in a thread.
        - ``cron`` (with ``tz``, default UTC) or ``every`` (a timedelta or seconds): a
          repeatable task. Every worker of the queue registers it at start under the
          task's name (the repeat key), and one run per slot is enqueued, with no
          arguments; ``missed`` (``"once"`` or ``"skip"``) says what a slot that came due
          while no worker ran does (docs/repeat.md).
        - ``group``: the jobs' group (docs/lanes.md): a name, or a callable of each job's
          arguments that picks one (``group=lambda customer, **_: customer``). The
          callable gets the arguments by parameter name, as the function receives them
          (defaults filled in), so ``send.delay("big", 1)`` and
          ``send.delay(customer="big", n=1)`` pick the same group. Groups take fair turns;
          each may have a concurrency and a rate limit.
        - ``group_concurrency``: the group's concurrency limit, set when the group has
          none yet (``admin.set_group_concurrency`` changes it at run time).
        - ``expires``: each job's deadline, a timedelta or seconds after its enqueue (on
          the server's clock) or an aware datetime: a job not started by then is never
          run, it ends ``expired`` and its ``result()`` raises ``JobExpired``
          (docs/runtime.md, "Expiry"). A repeatable's runs each expire that long after
          their own slot.

        Args:
            name: the task's name on the wire (default ``module.qualname``).

        Raises:
            InvalidArgument: a bad or unknown option, or the name is taken on this queue.
        """
        chosen = build_options(TaskOptions, options, fields)
        process = chosen.process

        def register(fn: Callable[..., Any]) -> Task[Any, Any]:
            if not callable(fn):
                raise InvalidArgument(f"@queue.task needs a function, not {fn!r}")
            if process and (inspect.iscoroutinefunction(fn) or wants_job(fn)):
                raise InvalidArgument(
                    "process=True needs a plain function without a Job parameter "
                    "(a coroutine, or the Job context, cannot cross to another process)"
                )
            if process and "<locals>" in fn.__qualname__:
                raise InvalidArgument("process=True needs a module-level function")
            task_name = name or f"{fn.__module__}.{fn.__qualname__}"
            if not isinstance(task_name, str) or not task_name:
                raise InvalidArgument("a task name must be a non-empty str")
            if chosen.schedule() is not None:
                try:
                    check_repeat_key(task_name)
                except InvalidKey as exc:
                    raise InvalidArgument(
                        f"a repeatable task's name is its repeat key: {exc}; "
                        "give the task a name= that is one"
                    ) from None
            if task_name in self.tasks:
                raise InvalidArgument(f"task {task_name!r} is already registered on {self.name}")
            task: Task[Any, Any] = Task(queue=self, fn=fn, name=task_name, options=chosen)
            self.tasks[task_name] = task
            return task

        return register(fn) if fn is not None else cast(Register, register)

    # -- connection ----------------------------------------------------------------------

    @property
    def is_open(self) -> bool:
        return self._conn is not None

    @property
    def connection(self) -> Connection:
        """The open connection.

        Raises:
            RuntimeError: the queue is not open.
        """
        if self._conn is None:
            raise self._not_open()
        return self._conn

    def _not_open(self) -> RuntimeError:
        return RuntimeError(f"queue {self.name!r} is not open: use `async with queue.open():`")

    @asynccontextmanager
    async def open(self) -> AsyncIterator[Queue]:
        """Connect for the duration of the block (re-entrant: an inner open reuses it)."""
        if self._conn is not None:
            yield self
            return
        async with connect(self.url) as conn, open_service_nursery() as nursery:
            self._conn, self._nursery = conn, nursery
            self.producer.open(conn, nursery)
            try:
                yield self
            finally:
                self._conn = self._nursery = self._feed = self._results = None
                self.producer.close()

    async def event_feed(self) -> EventFeed:
        """The queue's one event subscription, opened on first use."""
        if self._feed is not None:
            return self._feed
        async with self._feed_lock:
            if self._feed is None:
                if self._nursery is None:
                    self.connection  # noqa: B018 - raises the "not open" error
                assert self._nursery is not None
                self._feed = await self._nursery.start(self._serve_feed)
        assert self._feed is not None
        return self._feed

    async def result_feed(self) -> ResultFeed:
        """The queue's one reader of its completions stream, started on first use."""
        if self._results is not None:
            return self._results
        async with self._feed_lock:
            if self._results is None:
                if self._nursery is None:
                    self.connection  # noqa: B018 - raises the "not open" error
                assert self._nursery is not None
                feed = ResultFeed(
                    self.connection.config, self.name, gone_check=self.result_gone_check
                )
                self._results = await self._nursery.start(feed.run)
        assert self._results is not None
        return self._results

    async def _serve_feed(self, *, task_status: trio.TaskStatus[EventFeed]) -> None:
        async with open_event_feed(self.url, self.name) as feed:
            task_status.started(feed)
            await trio.sleep_forever()

    # -- producing ---------------------------------------------------------------------

    def handle(self, job_id: str) -> TaskHandle[Any]:
        """A handle for a job enqueued elsewhere (no I/O)."""
        return TaskHandle(check_id(job_id), self)

    async def enqueue_new(self, new: NewJob, *, task: str | None = None) -> TaskHandle[Any]:
        """Enqueue one prepared job; an existing ``job_id`` answers its handle, and so does
        a held dedup key the holder's (``deduplicated``).

        Concurrent calls on one open queue share script calls: while one enqueue is in
        flight, the others queue and go together as one bulk call when it answers, each
        with its own answer (docs/runtime.md, "Coalesced enqueues").

        With OpenTelemetry installed, inside a ``send <queue>`` span whose context the
        job's row carries (docs/observability.md).
        """
        return self._handle(await self.producer.enqueue_new(None, new, task), task)

    async def aenqueue_new(self, new: NewJob, *, task: str | None = None) -> TaskHandle[Any]:
        """The asyncio :meth:`enqueue_new` (``echomq.asyncio``)."""
        conn = self.asyncio_client().connection
        return self._handle(await self.producer.enqueue_new(conn, new, task), task)

    def enqueue_new_sync(self, new: NewJob, *, task: str | None = None) -> TaskHandle[Any]:
        """The blocking :meth:`enqueue_new` (``echomq.sync``)."""
        answer = self.sync_connection().run(self.producer.enqueue_new, new, task)
        return self._handle(answer, task)

    def _handle(self, answer: Sent, task: str | None) -> TaskHandle[Any]:
        return TaskHandle(answer[0], self, task, answer[1])

    async def repeat(
        self,
        task: Task[..., Any] | str,
        *,
        every: dt.timedelta | float | None = None,
        cron: str | None = None,
        tz: str | None = None,
        args: Sequence[Any] = (),
        kwargs: Mapping[str, Any] | None = None,
        key: str | None = None,
        missed: MissedPolicy = "once",
        grace: dt.timedelta | float | None = None,
        priority: int | None = None,
        max_attempts: int | None = None,
    ) -> repeat_verbs.Added:
        """Run ``task`` on a schedule: ``every`` (a timedelta or seconds) or ``cron`` (5
        fields, in the time zone ``tz``, default UTC), with ``args``/``kwargs``.

        ``key`` names the repeatable (default: the task's name); adding a key again updates
        it (the same schedule keeps its next slot). ``missed``: a run that came due while
        no worker ran is enqueued once, late (``"once"``, the default), or skipped when it
        is more than ``grace`` late (``"skip"``; default 60 s). The runs are enqueued by the
        workers of this queue (any number, no leader; docs/repeat.md).

        Raises:
            InvalidArgument, InvalidKey, SerializationError: before any I/O (a malformed
                cron, an interval <= 0, an unknown time zone...).
            RepeatFormatError: the key's record was written by another echomq.
            RuntimeError: the queue is not open.
        """
        name = task.name if isinstance(task, Task) else task
        if not isinstance(name, str) or not name:
            raise InvalidArgument(f"repeat needs a Task or a task name, not {task!r}")
        schedule = Schedule.of(every=every, cron=cron, tz=tz)
        repeat_key = check_repeat_key(name if key is None else key)
        registered = self.tasks.get(name)
        options = registered.options if registered is not None else TaskOptions()
        kwargs = {} if kwargs is None else kwargs
        if registered is not None:  # its runs call it with these arguments
            registered.shape.check(args, kwargs)
        payload = self.producer.payload(name, args, kwargs)
        return await repeat_verbs.add(
            self.connection,
            self.name,
            repeat_key,
            task=name,
            payload=payload,
            schedule=schedule,
            missed=missed,
            grace_ms=DEFAULT_GRACE_MS if grace is None else duration_ms("grace", grace),
            priority=options.priority if priority is None else priority,
            max_attempts=options.max_attempts if max_attempts is None else max_attempts,
            source=_API,
        )

    # -- the asyncio and blocking sides ----------------------------------------------------

    def sync_connection(self) -> SyncConnection:
        """The blocking connection (``echomq.sync``) the ``*_sync`` calls use; made on
        first use, shared by every thread."""
        if self._sync is None:
            from . import sync

            self._sync = sync.connect(self.url)
        return self._sync

    def close_sync(self) -> None:
        """Close the blocking connection's sockets (a later ``*_sync`` call connects again)."""
        if self._sync is not None:
            self._sync.close()

    def asyncio_client(self) -> AsyncioQueueClient:
        """This event loop's connection and stream reader (``echomq.asyncio``), made
        on first use (no I/O until a command).

        Raises:
            WrongEventLoop: no asyncio event loop is running (under trio: use the trio verb).
        """
        loop = _running_asyncio_loop()
        client = self._asyncio.get(loop)
        if client is None:
            from .asyncio import AsyncioQueueClient  # (imports redis.asyncio: only when used)

            client = self._asyncio[loop] = AsyncioQueueClient(self.url, self.name)
        return client

    async def aclose(self) -> None:
        """Close this event loop's connection and stream reader (asyncio)."""
        client = self._asyncio.pop(_running_asyncio_loop(), None)
        if client is not None:
            await client.aclose()

    @asynccontextmanager
    async def aopen(self) -> AsyncIterator[Queue]:
        """asyncio: connect now (an error surfaces here, e.g. in a FastAPI lifespan) and
        close this loop's connection when the block exits."""
        await self.asyncio_client().connection.execute("PING")
        try:
            yield self
        finally:
            await self.aclose()
