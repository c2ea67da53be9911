"""A registered task (``@queue.task``): ``Task[P, R]``, typed by its function.

Rule 1 (typed calls): a task is generic over its function's parameters (less a leading
``job: echomq.Job``, which the worker passes) and its return type: ``send.delay(...)``
takes what the function takes, and its handle's ``result()`` answers what the function
returns, to a type checker (tests/typing proves it). At run time the arguments are bound
against the function's signature before any I/O (a wrong call raises ``TypeError``).
Rule 2 (one path): every enqueue of a task (``delay``, ``apply``, their asyncio ``a*``
and blocking ``*_sync`` twins, ``map`` / ``starmap`` and their twins, a flow's
signatures) goes through the queue's one ``Producer`` (``_client/producer.py``): options,
binding, codec, tracing and, on trio, coalescing.
Rule 3: a task function is called by the worker with its arguments, plus the
:class:`~echomq.Job` context first when its first parameter is annotated ``echomq.Job``.
Rule 4 (typed payloads): parameters and a return type annotated with pydantic models
are validated into them, on the worker for the arguments and by ``handle.result()`` for
the result (``_model/typed.py``); the annotations are read on first use, so forward
references resolve once the module is loaded.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Generic, ParamSpec, TypeVar

import attrs

from ._client.binding import CallShape
from ._client.producer import Sent
from ._model.codec import Call
from ._model.job import NewJob
from ._model.options import EnqueueOptions, TaskOptions
from ._model.typed import Loader
from ._worker.context import Job
from .canvas import Signature
from .errors import InvalidArgument
from .handle import TaskHandle

if TYPE_CHECKING:
    from .queue import Queue

__all__ = ["Task", "wants_job"]

P = ParamSpec("P")
R = TypeVar("R")


def wants_job(fn: Callable[..., Any]) -> bool:
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


def _calls(items: Iterable[Sequence[Any]]) -> list[tuple[Sequence[Any], Mapping[str, Any]]]:
    calls: list[tuple[Sequence[Any], Mapping[str, Any]]] = []
    for item in items:
        if isinstance(item, str | bytes) or not isinstance(item, Sequence):
            raise InvalidArgument(f"starmap takes sequences of arguments, not {item!r:.80}")
        calls.append((item, {}))
    return calls


@attrs.define(eq=False, slots=False)  # no slots: functools.update_wrapper copies __doc__...
class Task(Generic[P, R]):
    """A registered task: ``.delay()`` / ``.apply()`` to enqueue, or call it directly."""

    queue: Queue
    fn: Callable[..., Any]
    name: str
    options: TaskOptions
    wants_job: bool = attrs.field(init=False)
    is_async: bool = attrs.field(init=False)
    #: the function's parameters as a call binds them (less the ``Job`` one)
    shape: CallShape = attrs.field(init=False, repr=False)

    def __attrs_post_init__(self) -> None:
        self.wants_job = wants_job(self.fn)
        self.is_async = inspect.iscoroutinefunction(self.fn)
        self.shape = CallShape(self.fn, skip_first=self.wants_job)
        functools.update_wrapper(self, self.fn)

    @functools.cached_property
    def loader(self) -> Loader:
        """The function's pydantic adapters (rule 4), made on first use."""
        return Loader(self.fn, skip_first=self.wants_job)

    @property
    def loads_models(self) -> bool:
        """Whether :meth:`load_call` validates any argument (rule 4)."""
        return bool(self.loader.keywords)

    def load_call(self, call: Call) -> Call:
        """``call`` with its model arguments validated (rule 4; the worker calls it).

        Raises:
            SerializationError: an argument does not fit its annotation.
        """
        return self.loader.load_call(call)

    def load_result(self, value: Any) -> Any:
        """A decoded result, validated into the annotated model when there is one."""
        return self.loader.load_result(value)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """Run the function here and now, as a plain call (no queue involved)."""
        return self.fn(*args, **kwargs)

    def s(self, *args: Any, **kwargs: Any) -> Signature[R]:
        """A signature: this call, not yet sent, for a flow (``echomq.chain(a.s(1),
        b.s())``, ``group``, ``chord``, ``flow``; docs/flows.md). Enqueue options:
        ``task.s(...).set(priority=1)``. A chain step or a chord's callback gets the
        previous result as its first argument: its arguments are bound with it, when the
        flow is built."""
        return Signature(self, args, kwargs)

    def si(self, *args: Any, **kwargs: Any) -> Signature[R]:
        """An immutable signature (Celery's ``si``): as :meth:`s`, but as a chain step or
        a chord's callback it is not given the previous result; it still runs after it."""
        return Signature(self, args, kwargs, immutable=True)

    # -- one job ---------------------------------------------------------------------------

    async def delay(self, *args: P.args, **kwargs: P.kwargs) -> TaskHandle[R]:
        """Enqueue with these arguments and the task's options (Celery's spelling).

        Raises:
            TypeError: the function does not take these arguments (before any I/O).
            SerializationError, PayloadTooLarge: before any I/O.
            RuntimeError: the queue is not open (after the checks).
        """
        queue = self.queue
        job_id, deduplicated = await queue.producer.enqueue(None, self, args, kwargs)
        return TaskHandle(job_id, queue, self.name, deduplicated)

    async def apply(
        self,
        args: Sequence[Any] = (),
        kwargs: Mapping[str, Any] | None = None,
        *,
        options: EnqueueOptions | None = None,
        **fields: Any,
    ) -> TaskHandle[R]:
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
        nothing), ``expires`` (a deadline: a timedelta or seconds after the enqueue, or an
        aware datetime; not started by then, the job never runs and ``result()`` raises
        ``JobExpired``; default the task's; docs/runtime.md, "Expiry").

        Raises:
            TypeError: the function does not take these arguments (before any I/O).
            SerializationError, InvalidKey, InvalidArgument: before any I/O (an unknown
                option too).
            RuntimeError: the queue is not open.
        """
        answer = await self.queue.producer.enqueue(None, self, args, kwargs, options, fields)
        return self._handle(answer)

    async def adelay(self, *args: P.args, **kwargs: P.kwargs) -> TaskHandle[R]:
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
    ) -> TaskHandle[R]:
        """The asyncio twin of :meth:`apply`: the same options, checks and handle."""
        conn = self.queue.asyncio_client().connection
        return self._handle(
            await self.queue.producer.enqueue(conn, self, args, kwargs, options, fields)
        )

    def delay_sync(self, *args: P.args, **kwargs: P.kwargs) -> TaskHandle[R]:
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
    ) -> TaskHandle[R]:
        """The blocking twin of :meth:`apply` (an existing ``job_id``: its handle, dedupe)."""
        sync = self.queue.sync_connection()
        producer = self.queue.producer
        return self._handle(sync.run(producer.enqueue, self, args, kwargs, options, fields))

    # -- many jobs -----------------------------------------------------------------------

    async def map(
        self, items: Iterable[Any], *, options: EnqueueOptions | None = None, **fields: Any
    ) -> list[TaskHandle[R]]:
        """Enqueue one job per item (the task called with that one argument), in chunks
        of at most 250 jobs sent in one pipelined write; answer their handles in order.

        Every job is checked before any I/O (a bad one: nothing is sent). Each chunk is
        atomic; the whole is not (an error after the write may leave some chunks written).
        The options are :meth:`apply`'s, but ``job_id`` (one id names one job).

        Raises:
            TypeError, SerializationError, InvalidArgument, InvalidKey: before any I/O.
            ConnectionLost...: as :meth:`apply`.
        """
        return await self.starmap([(item,) for item in items], options=options, **fields)

    async def starmap(
        self,
        items: Iterable[Sequence[Any]],
        *,
        options: EnqueueOptions | None = None,
        **fields: Any,
    ) -> list[TaskHandle[R]]:
        """:meth:`map` with each item the call's positional arguments
        (``add.starmap([(1, 2), (3, 4)])``)."""
        calls = _calls(items)  # (the open queue's connection, after the checks)
        answers = await self.queue.producer.enqueue_many(None, self, calls, options, fields)
        return [self._handle(answer) for answer in answers]

    async def amap(
        self, items: Iterable[Any], *, options: EnqueueOptions | None = None, **fields: Any
    ) -> list[TaskHandle[R]]:
        """The asyncio twin of :meth:`map`."""
        return await self.astarmap([(item,) for item in items], options=options, **fields)

    async def astarmap(
        self,
        items: Iterable[Sequence[Any]],
        *,
        options: EnqueueOptions | None = None,
        **fields: Any,
    ) -> list[TaskHandle[R]]:
        """The asyncio twin of :meth:`starmap`."""
        conn = self.queue.asyncio_client().connection
        answers = await self.queue.producer.enqueue_many(conn, self, _calls(items), options, fields)
        return [self._handle(answer) for answer in answers]

    def map_sync(
        self, items: Iterable[Any], *, options: EnqueueOptions | None = None, **fields: Any
    ) -> list[TaskHandle[R]]:
        """The blocking twin of :meth:`map`."""
        return self.starmap_sync([(item,) for item in items], options=options, **fields)

    def starmap_sync(
        self,
        items: Iterable[Sequence[Any]],
        *,
        options: EnqueueOptions | None = None,
        **fields: Any,
    ) -> list[TaskHandle[R]]:
        """The blocking twin of :meth:`starmap`."""
        sync = self.queue.sync_connection()
        producer = self.queue.producer
        answers = sync.run(producer.enqueue_many, self, _calls(items), options, fields)
        return [self._handle(answer) for answer in answers]

    # -- no I/O ---------------------------------------------------------------------------

    def new_job(
        self,
        args: Sequence[Any] = (),
        kwargs: Mapping[str, Any] | None = None,
        *,
        options: EnqueueOptions | None = None,
        **fields: Any,
    ) -> NewJob:
        """The job :meth:`apply` would enqueue: arguments bound and encoded, options
        checked, no I/O (for ``jobs.enqueue_many``)."""
        return self.queue.producer.new_job(self, args, kwargs, options, fields)

    def _handle(self, answer: Sent) -> TaskHandle[R]:
        return TaskHandle(answer[0], self.queue, self.name, answer[1])
