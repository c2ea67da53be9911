"""What users import: Queue, @queue.task, TaskHandle, and the Job context.

Rule 1: nothing here does I/O at construction. ``Queue(...)`` and ``@queue.task`` only
record names and options; ``async with queue.open()`` connects. Arguments are encoded
(and refused with :class:`~echomq.errors.SerializationError`) before any I/O.
Rule 2: the queue holds one connection and, at most, one reader of its completions stream
(opened the first time a ``result()`` waits, docs/results.md), shared by every handle.
Rule 3: a task function is called by the worker with its arguments, plus the
:class:`Job` context first when its first parameter is annotated ``echomq.Job``;
``current_job()`` answers the same object from anywhere inside the job. (The ``Job``
context belongs to the runtime, ``_worker/context.py``; it is re-exported here.)
"""

from __future__ import annotations

import asyncio
import datetime as dt
import functools
import inspect
import logging
import math
import os
import weakref
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any, overload

import attrs
import trio

from . import _tracing, jobs
from . import repeat as repeat_verbs
from ._client.coalesce import EnqueueCoalescer
from ._model.cancel import MAX_REASON as MAX_REASON  # (moved: re-exported)
from ._model.cancel import cancelled_reason as cancelled_reason
from ._model.cancel import cancelled_result as cancelled_result
from ._model.codec import JSON, Codec
from ._model.job import JobInfo, NewJob
from ._model.options import DEFAULT_LEASE as DEFAULT_LEASE  # (moved: re-exported)
from ._model.options import EnqueueOptions, TaskOptions, build_options
from ._model.options import seconds as _seconds
from ._model.options import to_ms as to_ms
from ._model.repeat import RepeatSource
from ._model.schedule import DEFAULT_GRACE_MS, MissedPolicy, Schedule, duration_ms
from ._scripts.calls import Executor
from ._scripts.keyspace import check_id, check_queue, check_repeat_key
from ._trio import open_service_nursery
from ._wire.connection import Connection
from ._wire.dial import connect
from ._worker.context import Job, current_job
from .cancel import CancelOutcome
from .cancel import request as cancel_request
from .canvas import Signature
from .config import DEFAULT_URL
from .errors import (
    DuplicateJob,
    InvalidArgument,
    InvalidKey,
    JobCancelled,
    JobFailed,
    JobGone,
)
from .events import EventFeed, open_event_feed
from .jobs.lifecycle import default_group, enqueue_group
from .results import GONE_CHECK, FinishState, Outcome, ResultFeed

if TYPE_CHECKING:
    from .asyncio import AsyncioQueueClient
    from .sync import SyncConnection

__all__ = [
    "EnqueueOptions",
    "Job",
    "Queue",
    "Task",
    "TaskHandle",
    "TaskOptions",
    "current_job",
]

log = logging.getLogger("echomq")

_API: RepeatSource = "api"


def _wants_job(fn: Callable[..., Any]) -> bool:
    """True when the first parameter is annotated ``Job``.

    Annotations are evaluated (``from __future__ import annotations`` makes them strings):
    ``job: echomq.Job``, ``job: Job``, ``job: "Job"`` all resolve to the class. Only when
    they cannot be evaluated (a name not importable at registration) is the text read,
    and its last dotted part compared with ``Job``.
    """
    try:
        params = list(inspect.signature(fn, eval_str=True).parameters.values())
    except (TypeError, ValueError):
        return False
    except Exception:  # an annotation that does not evaluate (NameError...): read its text
        try:
            params = list(inspect.signature(fn).parameters.values())
        except (TypeError, ValueError):
            return False
    if not params or params[0].kind not in (
        params[0].POSITIONAL_ONLY,
        params[0].POSITIONAL_OR_KEYWORD,
    ):
        return False
    ann = params[0].annotation
    if ann is Job:
        return True
    return isinstance(ann, str) and ann.rsplit(".", 1)[-1] == "Job"


@attrs.define(eq=False, slots=False)  # no slots: functools.update_wrapper copies __doc__...
class Task:
    """A registered task: call ``.delay()`` / ``.apply()`` to enqueue, or call it directly."""

    queue: Queue
    fn: Callable[..., Any]
    name: str
    options: TaskOptions
    wants_job: bool = attrs.field(init=False)
    is_async: bool = attrs.field(init=False)
    # delay()'s option set (``enqueue_group(job).options``) for these options and name,
    # kept by its first untraced call (rule 2: checked once, as the first job's)
    _delay_options: tuple[TaskOptions, str, tuple[Any, ...]] | None = attrs.field(
        default=None, init=False, repr=False
    )

    def __attrs_post_init__(self) -> None:
        self.wants_job = _wants_job(self.fn)
        self.is_async = inspect.iscoroutinefunction(self.fn)
        functools.update_wrapper(self, self.fn)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """Run the function here and now, as a plain call (no queue involved)."""
        return self.fn(*args, **kwargs)

    def s(self, *args: Any, **kwargs: Any) -> Signature:
        """A signature: this call, not yet sent, for a flow (``echomq.chain(a.s(1),
        b.s())``, ``group``, ``chord``, ``flow``; docs/flows.md). Enqueue options:
        ``task.s(...).set(priority=1)``."""
        return Signature(self, args, kwargs)

    async def delay(self, *args: Any, **kwargs: Any) -> TaskHandle:
        """Enqueue with these arguments and the task's options (Celery's spelling).

        :meth:`apply` with no options, written out: the untraced call goes to the queue's
        coalescer from here, and after the first one with the task's option set as
        ``enqueue.lua`` reads it, gated once (:meth:`_delay_first`): no ``NewJob`` and no
        options checked again per call, only the arguments encoded and a fresh id."""
        queue = self.queue
        coalescer = queue._coalescer
        known = self._delay_options
        if (
            known is None
            or known[0] is not self.options
            or known[1] is not self.name
            or coalescer is None
            or (_tracing.ENABLED and _tracing.on())
        ):
            return await self._delay_first(args, kwargs)
        group = default_group(queue.codec.encode_call(self.name, args, kwargs), known[2])
        caller = coalescer.join(group)
        if caller is None:
            answer = await coalescer.send_alone(group)
        else:
            answer = await trio.lowlevel.wait_task_rescheduled(caller)
        if answer is None:  # written with the id it was sent with
            return TaskHandle(group.id, queue, self.name)
        return TaskHandle(answer.id, queue, self.name, answer.deduplicated)

    async def _delay_first(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> TaskHandle:
        """:meth:`delay` the long way (every check, in the order :meth:`apply` makes them):
        the first call, a traced one, a closed queue, or a group callable (called per job).
        An untraced call on an open queue keeps its option set for the next ones."""
        new = self.new_job(args, kwargs)
        queue = self.queue
        coalescer = queue._coalescer
        if coalescer is None or (_tracing.ENABLED and _tracing.on()):
            return await queue.enqueue_new(new, task=self.name)
        group = enqueue_group(new)
        if not callable(self.options.group):  # the same set for every delay() of the task
            self._delay_options = (self.options, self.name, group.options)
        answer = await coalescer.enqueue_gated(group)  # no job_id here: never DuplicateJob
        if answer is None:
            return TaskHandle(group.id, queue, self.name)
        return TaskHandle(answer.id, queue, self.name, answer.deduplicated)

    async def apply(
        self,
        args: Sequence[Any] = (),
        kwargs: Mapping[str, Any] | None = None,
        *,
        options: EnqueueOptions | None = None,
        **fields: Any,
    ) -> TaskHandle:
        """Enqueue with options; answer the job's handle.

        The options are :class:`~echomq.app.EnqueueOptions`' fields, given as keywords
        (``delay=10.0, priority=1, job_id="welcome-42"``) or as one value
        (``options=EnqueueOptions(...)``; keywords given too replace its fields): ``delay``
        (seconds), ``at`` (a datetime or epoch seconds), ``priority`` (higher first;
        default the task's), ``job_id`` (an id of your own: when a job with that id exists,
        nothing is written and its handle is answered, ``handle.deduplicated``),
        ``max_attempts`` (default the task's), ``group`` (the job's lane: a name, or a
        callable of the arguments that picks one; default the task's; docs/lanes.md),
        ``group_concurrency`` (the group's limit when it has none yet), ``dedup`` with
        ``dedup_for`` (a dedup key and its window: inside the window a second apply with
        the key answers the first job's handle, ``handle.deduplicated``, and writes
        nothing).

        Raises:
            SerializationError, InvalidKey, InvalidArgument: before any I/O (an unknown
                option too).
            RuntimeError: the queue is not open.
        """
        new = self.new_job(args, kwargs, options=options, **fields)
        return await self.queue.enqueue_new(new, task=self.name)

    async def adelay(self, *args: Any, **kwargs: Any) -> TaskHandle:
        """The asyncio twin of :meth:`delay` (FastAPI, aiohttp...): no ``queue.open()``
        needed, the queue connects on first use in the running loop (``echomq.asyncio``)."""
        return await self.aapply(args, kwargs)

    async def aapply(
        self,
        args: Sequence[Any] = (),
        kwargs: Mapping[str, Any] | None = None,
        *,
        options: EnqueueOptions | None = None,
        **fields: Any,
    ) -> TaskHandle:
        """The asyncio twin of :meth:`apply`: the same options, checks and handle."""
        new = self.new_job(args, kwargs, options=options, **fields)
        return await self.queue.aenqueue_new(new, task=self.name)

    def delay_sync(self, *args: Any, **kwargs: Any) -> TaskHandle:
        """The blocking twin of :meth:`delay` (redis-py, for code that is not async).

        Needs no ``queue.open()``: it uses ``echomq.sync``. The handle's ``result_sync()``,
        ``cancel_sync()`` and ``info_sync()`` block too.
        """
        return self.apply_sync(args, kwargs)

    def apply_sync(
        self,
        args: Sequence[Any] = (),
        kwargs: Mapping[str, Any] | None = None,
        *,
        options: EnqueueOptions | None = None,
        **fields: Any,
    ) -> TaskHandle:
        """The blocking twin of :meth:`apply` (an existing ``job_id``: its handle, dedupe)."""
        new = self.new_job(args, kwargs, options=options, **fields)
        return self.queue.enqueue_new_sync(new, task=self.name)

    def new_job(
        self,
        args: Sequence[Any] = (),
        kwargs: Mapping[str, Any] | None = None,
        *,
        options: EnqueueOptions | None = None,
        **fields: Any,
    ) -> NewJob:
        """The job :meth:`apply` would enqueue: options checked, arguments encoded, no I/O."""
        chosen = build_options(EnqueueOptions, options, fields)
        kind = type(args)  # the common kinds first: an ABC isinstance is slow
        if (
            kind is not tuple
            and kind is not list
            and (isinstance(args, str | bytes) or not isinstance(args, Sequence))
        ):
            raise InvalidArgument("args must be a sequence (a tuple or a list)")
        kwargs = {} if kwargs is None else kwargs
        if type(kwargs) is not dict and not isinstance(kwargs, Mapping):
            raise InvalidArgument("kwargs must be a mapping")
        payload = self.queue.codec.encode_call(self.name, args, kwargs)
        return chosen.new_job(payload, self.options, self.name, args=args, kwargs=kwargs)


async def _enqueue_one(conn: Executor, queue: str, new: NewJob) -> jobs.Enqueued:
    """One job in its own enqueue call (the asyncio side: no coalescing there)."""
    (answer,) = await jobs.enqueue_batch(conn, queue, [new])
    return answer


@attrs.define(eq=False)
class TaskHandle:
    """A job by id: wait for its result, cancel it, read its row.

    ``deduplicated`` is True when ``apply(job_id=...)`` found the job already there, or
    ``apply(dedup=...)`` found its dedup key held: the handle is then the first job's.
    """

    id: str
    queue: Queue
    task: str | None = None
    deduplicated: bool = False
    _removed_reason: str | None = attrs.field(default=None, init=False)
    _removed: bool = attrs.field(default=False, init=False)

    async def info(self) -> JobInfo | None:
        """The job's row, or None when there is none."""
        return await jobs.get_job(self.queue.connection, self.queue.name, self.id)

    async def cancel(
        self, reason: str | None = None, *, grace: float | None = None
    ) -> CancelOutcome:
        """Remove the job if unclaimed, or signal its worker if active.

        ``grace`` (seconds): if the job has not stopped when it runs out, its attempt is
        fenced (settled cancelled; whatever it does later cannot commit) and its worker
        stops it hard (a process task's child is killed, a thread task abandoned).
        ``grace=0`` fences it now. ``None``: cooperative only (docs/runtime.md).

        Raises:
            InvalidArgument: a negative or non-finite grace (before any I/O).
            JobGone: no row. NotCancellable: the job already finished.
        """
        outcome = await cancel_request(
            self.queue.connection, self.queue.name, self.id, reason, grace=grace
        )
        return self._cancelled(outcome, reason)

    async def result(self, timeout: float | None = None) -> Any:  # noqa: ASYNC109 - Celery's spelling
        """Wait for the job to finish and answer its return value.

        Reads the job's row, then (while it runs) the queue's completions stream from
        where the row was read: the queue's one stream reader hands the entry over, so
        nothing polls, and a call made late, or across a Redis reconnect, still finds the
        outcome while the job's row is kept (its retention, docs/results.md).

        Raises:
            JobFailed: the job is dead (``error`` is its last error text).
            JobCancelled: the job was cancelled (``reason``).
            JobGone: the job has no row: it finished longer ago than its retention
                (``keep_result``, 24 h by default), the count guard deleted it, or it was
                removed.
            trio.TooSlowError: ``timeout`` seconds passed first.
        """
        limit = math.inf if timeout is None else _seconds("timeout", timeout)
        queue = self.queue
        with trio.fail_after(limit):
            feed = await queue.result_feed()
            outcome = await feed.wait(queue.connection, self.id)
        return self._value(outcome)

    # -- asyncio twins (echomq.asyncio) ---------------------------------------------------

    async def ainfo(self) -> JobInfo | None:
        """The asyncio twin of :meth:`info`."""
        return await jobs.get_job(self.queue.asyncio_client().connection, self.queue.name, self.id)

    async def acancel(
        self, reason: str | None = None, *, grace: float | None = None
    ) -> CancelOutcome:
        """The asyncio twin of :meth:`cancel`."""
        conn = self.queue.asyncio_client().connection
        outcome = await cancel_request(conn, self.queue.name, self.id, reason, grace=grace)
        return self._cancelled(outcome, reason)

    async def aresult(self, timeout: float | None = None) -> Any:  # noqa: ASYNC109 - Celery's spelling
        """The asyncio twin of :meth:`result`: the row, then the completions stream from
        where the row was read, through this loop's one stream reader of the queue (the
        same rules as ``echomq.results.ResultFeed``): nothing polls, nothing is missed.

        Raises:
            JobFailed, JobCancelled, JobGone: as :meth:`result`.
            TimeoutError: ``timeout`` seconds passed first (the builtin).
        """
        import asyncio

        limit = None if timeout is None else _seconds("timeout", timeout)
        client = self.queue.asyncio_client()
        async with asyncio.timeout(limit):
            outcome = await client.results.wait(client.connection, self.id)
        return self._value(outcome)

    # -- blocking twins (echomq.sync) ------------------------------------------------------

    def info_sync(self) -> JobInfo | None:
        """The blocking twin of :meth:`info`."""
        return self.queue.sync_connection().get_job(self.queue.name, self.id)

    def cancel_sync(
        self, reason: str | None = None, *, grace: float | None = None
    ) -> CancelOutcome:
        """The blocking twin of :meth:`cancel`."""
        sync = self.queue.sync_connection()
        outcome = sync.cancel(self.queue.name, self.id, reason, grace=grace)
        return self._cancelled(outcome, reason)

    def result_sync(self, timeout: float | None = None) -> Any:
        """The blocking twin of :meth:`result` (``echomq.sync``: no ``queue.open()``
        needed); it waits with an ``XREAD`` of its own.

        Raises:
            JobFailed, JobCancelled, JobGone: as :meth:`result`.
            TimeoutError: ``timeout`` seconds passed first (the builtin).
        """
        limit = None if timeout is None else _seconds("timeout", timeout)
        outcome = self.queue.sync_connection().wait_outcome(self.queue.name, self.id, limit)
        return self._value(outcome)

    def _cancelled(self, outcome: CancelOutcome, reason: str | None) -> CancelOutcome:
        if outcome is CancelOutcome.REMOVED:
            self._removed, self._removed_reason = True, reason
        return outcome

    def _value(self, outcome: Outcome | None) -> Any:
        if outcome is None:
            if self._removed:
                raise JobCancelled(self._removed_reason, job_id=self.id)
            raise JobGone(
                f"job {self.id} has no row: it finished longer ago than its retention "
                "(keep_result, 24 h unless the task or the queue says otherwise), the "
                "queue's count guard deleted it early (admin.stats: capped), or it was "
                "removed"
            )
        if outcome.state is FinishState.DEAD:
            raise JobFailed(self.id, outcome.error)
        if outcome.state is FinishState.CANCELLED:
            raise JobCancelled(outcome.reason or None, job_id=self.id)
        if not outcome.result:
            return None
        return self.queue.codec.decode_result(outcome.result)


class Queue:
    """A named queue and its registered tasks. No I/O until :meth:`open`.

    Args:
        name: the queue's name (1..128 of ``[A-Za-z0-9._~-]``).
        url: the Redis URL; default ``$ECHOMQ_URL`` or ``redis://127.0.0.1:6379/0``.
        codec: how payloads and results are encoded (JSON).
    """

    def __init__(self, name: str, url: str | None = None, *, codec: Codec = JSON) -> None:
        self.name = check_queue(name)
        self.url = url if url is not None else os.environ.get("ECHOMQ_URL", DEFAULT_URL)
        self.codec = codec
        self.tasks: dict[str, Task] = {}
        self._conn: Connection | None = None
        self._nursery: trio.Nursery | None = None
        self._coalescer: EnqueueCoalescer | None = None  # the trio side's single enqueues
        self._feed: EventFeed | None = None
        self._feed_lock = trio.Lock()
        self._results: ResultFeed | None = None
        self.result_gone_check = GONE_CHECK  # seconds: how soon a removed job's waiter knows
        self._sync: SyncConnection | None = None  # the blocking side, made on first use
        # the asyncio side: one client (connection + stream reader) per event loop
        self._asyncio: weakref.WeakKeyDictionary[Any, AsyncioQueueClient] = (
            weakref.WeakKeyDictionary()
        )

    def __repr__(self) -> str:
        return f"Queue({self.name!r}, tasks={sorted(self.tasks)})"

    # -- registration ------------------------------------------------------------------

    @overload
    def task(self, fn: Callable[..., Any], /) -> Task: ...

    @overload
    def task(
        self, /, *, name: str | None = None, options: TaskOptions | None = None, **fields: Any
    ) -> Callable[[Callable[..., Any]], Task]: ...

    def task(
        self,
        fn: Callable[..., Any] | None = None,
        /,
        *,
        name: str | None = None,
        options: TaskOptions | None = None,
        **fields: Any,
    ) -> Task | Callable[[Callable[..., Any]], Task]:
        """Register a coroutine function (or a plain one, run in a thread) as a task.

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
          cross by pickle). Default: plain functions run in a thread.
        - ``cron`` (with ``tz``, default UTC) or ``every`` (a timedelta or seconds): a
          repeatable task. Every worker of the queue registers it at start under the
          task's name (the repeat key), and one run per slot is enqueued, with no
          arguments; ``missed`` (``"once"`` or ``"skip"``) says what a slot that came due
          while no worker ran does (docs/repeat.md).
        - ``group``: the jobs' group (docs/lanes.md): a name, or a callable of each job's
          arguments that picks one (``group=lambda customer, **_: customer``). Groups take
          fair turns; each may have a concurrency and a rate limit.
        - ``group_concurrency``: the group's concurrency limit, set when the group has
          none yet (``admin.set_group_concurrency`` changes it at run time).

        Args:
            name: the task's name on the wire (default ``module.qualname``).

        Raises:
            InvalidArgument: a bad or unknown option, or the name is taken on this queue.
        """
        chosen = build_options(TaskOptions, options, fields)
        process = chosen.process

        def register(fn: Callable[..., Any]) -> Task:
            if not callable(fn):
                raise InvalidArgument(f"@queue.task needs a function, not {fn!r}")
            if process and (inspect.iscoroutinefunction(fn) or _wants_job(fn)):
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
            task = Task(queue=self, fn=fn, name=task_name, options=chosen)
            self.tasks[task_name] = task
            return task

        return register(fn) if fn is not None else register

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
            self._coalescer = EnqueueCoalescer(conn, self.name, nursery)
            try:
                yield self
            finally:
                self._conn = self._nursery = self._feed = self._results = None
                self._coalescer = None

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

    def handle(self, job_id: str) -> TaskHandle:
        """A handle for a job enqueued elsewhere (no I/O)."""
        return TaskHandle(check_id(job_id), self)

    async def enqueue_new(self, new: jobs.NewJob, *, task: str | None = None) -> TaskHandle:
        """Enqueue one prepared job; an existing ``job_id`` answers its handle, and so does
        a held dedup key the holder's (``deduplicated``).

        Concurrent calls on one open queue share script calls: while one enqueue is in
        flight, the others queue and go together as one bulk call when it answers, each
        with its own answer (docs/runtime.md, "Coalesced enqueues").

        With OpenTelemetry installed, inside a ``send <queue>`` span whose context the
        job's row carries (docs/observability.md).
        """
        if _tracing.ENABLED and _tracing.on():
            with _tracing.sending(self.name, task) as send:
                traced = _with_trace(new, send)
                handle = await self._enqueue(self._open_coalescer().enqueue, traced, task)
                send.sent(handle.id, handle.deduplicated)
            return handle
        return await self._enqueue(self._open_coalescer().enqueue, new, task)

    def _open_coalescer(self) -> EnqueueCoalescer:
        """The trio side's coalescer (made with the connection, gone with it)."""
        if self._coalescer is None:
            raise self._not_open()
        return self._coalescer

    async def aenqueue_new(self, new: jobs.NewJob, *, task: str | None = None) -> TaskHandle:
        """The asyncio :meth:`enqueue_new` (``echomq.asyncio``)."""
        conn = self.asyncio_client().connection
        one = functools.partial(_enqueue_one, conn, self.name)
        if _tracing.ENABLED and _tracing.on():
            with _tracing.sending(self.name, task) as send:
                handle = await self._enqueue(one, _with_trace(new, send), task)
                send.sent(handle.id, handle.deduplicated)
            return handle
        return await self._enqueue(one, new, task)

    def enqueue_new_sync(self, new: jobs.NewJob, *, task: str | None = None) -> TaskHandle:
        """Blocking :meth:`enqueue_new` through ``echomq.sync``; an existing ``job_id``
        answers its handle (dedupe)."""
        if _tracing.ENABLED and _tracing.on():
            with _tracing.sending(self.name, task) as send:
                handle = self._enqueue_sync(_with_trace(new, send), task)
                send.sent(handle.id, handle.deduplicated)
            return handle
        return self._enqueue_sync(new, task)

    async def _enqueue(
        self,
        send: Callable[[jobs.NewJob], Awaitable[jobs.Enqueued]],
        new: jobs.NewJob,
        task: str | None,
    ) -> TaskHandle:
        """``new`` sent by ``send``, as a handle (an existing ``job_id``: that job's)."""
        try:
            answer = await send(new)
        except DuplicateJob:
            assert new.job_id is not None
            return TaskHandle(new.job_id, self, task, deduplicated=True)
        return TaskHandle(answer.id, self, task, deduplicated=answer.deduplicated)

    async def repeat(
        self,
        task: Task | str,
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
        options = self.tasks[name].options if name in self.tasks else TaskOptions()
        if isinstance(args, str | bytes) or not isinstance(args, Sequence):
            raise InvalidArgument("args must be a sequence (a tuple or a list)")
        payload = self.codec.encode_call(name, args, {} if kwargs is None else kwargs)
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

    def _enqueue_sync(self, new: jobs.NewJob, task: str | None) -> TaskHandle:
        try:
            (answer,) = self.sync_connection().enqueue_batch(self.name, [new])
        except DuplicateJob:
            assert new.job_id is not None
            return TaskHandle(new.job_id, self, task, deduplicated=True)
        return TaskHandle(answer.id, self, task, deduplicated=answer.deduplicated)

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
            RuntimeError: no asyncio event loop is running.
        """
        loop = asyncio.get_running_loop()
        client = self._asyncio.get(loop)
        if client is None:
            from .asyncio import AsyncioQueueClient  # (imports redis.asyncio: only when used)

            client = self._asyncio[loop] = AsyncioQueueClient(self.url, self.name)
        return client

    async def aclose(self) -> None:
        """Close this event loop's connection and stream reader (asyncio)."""
        client = self._asyncio.pop(asyncio.get_running_loop(), None)
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


def _with_trace(new: NewJob, send: _tracing.Sending) -> NewJob:
    """``new`` carrying the enqueue span's context (unchanged when there is none)."""
    return attrs.evolve(new, trace=send.trace) if send.trace is not None else new
