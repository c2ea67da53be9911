"""One queue's enqueues, whoever calls: the one path from a task call to ``enqueue.lua``.

Rule 1 (one gate): every enqueue (``delay``, ``apply``, their asyncio and blocking twins,
``map`` / ``starmap``, a flow's jobs, ``Queue.enqueue_new*``, a repeatable's payload) is
checked here before any I/O: the arguments against the task's parameters
(:class:`~echomq._client.binding.CallShape`: ``TypeError``), the options
(``EnqueueOptions``: ``InvalidArgument``, ``InvalidKey``), the codec
(``SerializationError``) and the script's own gates (``lifecycle.gate_job``: ids, caps,
``PayloadTooLarge``). A call of a task with no options keeps the task's option set as the
script reads it after its first gate (for the task's current ``options``): later calls
encode the arguments and draw an id, nothing else.
Rule 2 (one trace, one set of headers): with OpenTelemetry on, each enqueue is a
``send <queue>`` span whose context the job's headers carry (``_model/headers.py``); a bulk
call is one span, each of its jobs carrying it. With ``before_enqueue`` hooks on the queue
(``enqueue_hooks.py``), each job's hooks run first, before the span, and their headers go
in the same row field; a call with no hooks and no tracing pays one attribute test.
Rule 3 (the sends): on trio a single job goes through the queue's :class:`Coalescer`
(concurrent callers share script calls); on asyncio and blocking code, one call per job
(the blocking one is the same coroutine, driven by ``run_sync`` on a connection whose
commands block). A bulk call (:meth:`Producer.enqueue_many`) is chunks of at most
``MAX_ENQUEUE`` jobs and ``config.MAX_BATCH_BYTES`` bytes, sent in one pipelined write.
"""

from __future__ import annotations

from collections.abc import Coroutine, Iterable, Mapping, Sequence
from typing import Any, Protocol

import attrs
import trio

from .. import _tracing, config
from .._model.codec import Codec
from .._model.flow import FlowJob
from .._model.headers import decode_headers, encode_headers
from .._model.job import NewJob
from .._model.options import EnqueueOptions, TaskOptions, build_options
from .._scripts import validate as v
from .._scripts.calls import Executor, evaluate, evaluate_reply, is_sharded
from ..errors import DuplicateJob, InvalidArgument, UnencodableArgument
from ..flows import add_flow
from ..jobs.lifecycle import GatedJob, enqueue_gated_call, gate_job, new_id
from .binding import CallShape
from .coalesce import Coalescer, Sent
from .enqueue_hooks import BeforeEnqueue, Enqueueing, HookErrors, run_before

__all__ = ["Call", "Producer", "Sent", "TaskRef"]

#: one call of a task: its positional and keyword arguments
Call = tuple[Sequence[Any], Mapping[str, Any]]

_NO_FIELDS: Mapping[str, Any] = {}


class Pipelined(Executor, Protocol):
    """A connection that pipelines (trio, asyncio, blocking): what a bulk send needs."""

    async def execute_pipeline(self, commands: Sequence[Sequence[Any]]) -> list[Any]: ...


class ProducerHooks(Protocol):
    """What the producer reads of a queue's hooks (``echomq.Hooks``)."""

    @property
    def before(self) -> Sequence[BeforeEnqueue]: ...

    @property
    def errors(self) -> HookErrors: ...


class TaskRef(Protocol):
    """What the producer reads of a task (``echomq.Task``)."""

    @property
    def name(self) -> str: ...

    @property
    def options(self) -> TaskOptions: ...

    @property
    def shape(self) -> CallShape: ...


class Producer:
    """The enqueue path of one queue (``Queue`` makes one; no I/O until a send)."""

    def __init__(self, queue: str, codec: Codec) -> None:
        self.queue = queue
        self.codec = codec
        # a task's option set as ``gate_job`` made it, for its options of then, by name
        self._kept: dict[str, tuple[TaskOptions, tuple[Any, ...]]] = {}
        self._coalescer: Coalescer | None = None
        self._conn: Pipelined | None = None  # the open queue's trio connection
        self.hooks: ProducerHooks | None = None  # the queue's (rule 2)

    # -- the trio side's coalescer (one per ``queue.open()`` connection) ---------------------

    def open(self, conn: Pipelined, nursery: trio.Nursery) -> None:
        self._conn = conn
        self._coalescer = Coalescer(conn, self.queue, nursery)

    def close(self) -> None:
        self._conn = self._coalescer = None

    def _not_open(self) -> RuntimeError:
        return RuntimeError(f"queue {self.queue!r} is not open: use `async with queue.open():`")

    @property
    def coalescer(self) -> Coalescer:
        """The open queue's coalescer.

        Raises:
            RuntimeError: the queue is not open.
        """
        if self._coalescer is None:
            raise self._not_open()
        return self._coalescer

    # -- gating (no I/O) ---------------------------------------------------------------

    def new_job(
        self,
        task: TaskRef,
        args: Sequence[Any] = (),
        kwargs: Mapping[str, Any] | None = None,
        options: EnqueueOptions | None = None,
        fields: Mapping[str, Any] = _NO_FIELDS,
        *,
        fed: bool = False,
    ) -> NewJob:
        """The job a call of ``task`` enqueues: arguments bound and encoded, options over
        the task's. No I/O. ``fed``: a flow step given the previous result first (bound
        with a stand-in for it; the worker passes it).

        Raises:
            TypeError: the task's function does not take these arguments.
            InvalidArgument, InvalidKey, SerializationError: a bad option or argument.
        """
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
        task.shape.check((None, *args) if fed else args, kwargs)
        payload = self._encode(task, args, kwargs, fed)
        choice = chosen.group if chosen.group is not None else task.options.group
        if callable(choice):  # called with the arguments by name (binding.py rule 3)
            named = task.shape.named(args, kwargs, fed=fed)
            if named is not None:
                return chosen.new_job(payload, task.options, task.name, kwargs=named)
        return chosen.new_job(payload, task.options, task.name, args=args, kwargs=kwargs)

    def gate(
        self,
        task: TaskRef,
        args: Sequence[Any] = (),
        kwargs: Mapping[str, Any] | None = None,
        options: EnqueueOptions | None = None,
        fields: Mapping[str, Any] = _NO_FIELDS,
        headers: str | None = None,
    ) -> GatedJob:
        """:meth:`new_job`, gated for the script (rule 1: a call with no options, after
        the task's first, only binds, encodes and draws an id).

        Raises:
            as :meth:`new_job`; PayloadTooLarge.
        """
        plain = options is None and not fields and headers is None
        if plain:
            name = task.name
            kept = self._kept.get(name)
            if kept is not None and kept[0] is task.options:
                kind = type(args)
                if kwargs is None:
                    kwargs = {}
                if (kind is tuple or kind is list) and type(kwargs) is dict:
                    task.shape.check(args, kwargs)
                    payload = self._encode(task, args, kwargs)
                    return GatedJob(new_id(), v.payload_bytes(payload), kept[1])
        new = self.new_job(task, args, kwargs, options, fields)
        job = gate_job(new if headers is None else attrs.evolve(new, headers=headers))
        if plain and not callable(task.options.group):  # (a callable: called per job)
            if len(self._kept) >= 1024:
                self._kept.clear()
            self._kept[task.name] = (task.options, job.options)
        return job

    def _encode(
        self, task: TaskRef, args: Sequence[Any], kwargs: Mapping[str, Any], fed: bool = False
    ) -> bytes:
        """The call's payload; an argument the codec refuses named by its parameter."""
        try:
            return self.codec.encode_call(task.name, args, kwargs)
        except UnencodableArgument as exc:
            if not isinstance(exc.argument, int):
                raise
            name = task.shape.parameter(exc.argument, fed=fed)
            if name is None:
                raise
            raise UnencodableArgument(name, exc.detail, exc.kind, codec=exc.codec) from None

    def payload(self, name: str, args: Sequence[Any], kwargs: Mapping[str, Any]) -> bytes:
        """A call's payload for a job written elsewhere (a repeatable's runs)."""
        if isinstance(args, str | bytes) or not isinstance(args, Sequence):
            raise InvalidArgument("args must be a sequence (a tuple or a list)")
        return self.codec.encode_call(name, args, kwargs)

    # -- one job --------------------------------------------------------------------------

    def enqueue(
        self,
        conn: Executor | None,
        task: TaskRef,
        args: Sequence[Any] = (),
        kwargs: Mapping[str, Any] | None = None,
        options: EnqueueOptions | None = None,
        fields: Mapping[str, Any] = _NO_FIELDS,
    ) -> Coroutine[Any, Any, Sent]:
        """Gate one call of ``task`` (now, before any I/O) and answer the coroutine that
        sends it (await it next): through the trio coalescer (``conn`` None: the open
        queue's), else in its own call on ``conn`` (asyncio, blocking). It answers the
        job's ``(id, deduplicated)``: an existing ``job_id`` answers that job, a held dedup
        key the holder's.

        A plain function, not a coroutine: a caller queued in the coalescer then waits
        in its own coroutine and trio's alone (``Rendezvous`` says why that counts).

        Raises:
            RuntimeError: ``conn`` None and the queue is not open.
            as :meth:`gate`; then (awaited) what the call raises.
        """
        hooks = self.hooks
        if hooks is not None and hooks.before:
            new = self.new_job(task, args, kwargs, options, fields)
            gate_job(new)  # its errors now, before any I/O
            return self._hooked(conn, new, task.name)
        if _tracing.ENABLED and _tracing.on():
            return self._traced_call(conn, task, args, kwargs, options, fields)
        job = self.gate(task, args, kwargs, options, fields)
        if conn is None:
            return self.coalescer.enqueue(job)
        return self._sent(conn, job)

    async def enqueue_new(
        self, conn: Executor | None, new: NewJob, task: str | None = None
    ) -> Sent:
        """:meth:`enqueue` of a prepared job (its own ``headers`` kept, the hooks' added)."""
        hooks = self.hooks
        if hooks is not None and hooks.before:
            gate_job(new)
            return await self._hooked(conn, new, task)
        if _tracing.ENABLED and _tracing.on():
            with _tracing.sending(self.queue, task) as span:
                job = gate_job(_with_headers(new, span.carrier))
                answer = await self._sent(conn, job)
                span.sent(*answer)
            return answer
        return await self._sent(conn, gate_job(new))

    async def _headed(self, new: NewJob, task: str | None) -> NewJob:
        """``new`` with the headers its ``before_enqueue`` hooks add (rule 2)."""
        hooks = self.hooks
        assert hooks is not None
        given = dict(decode_headers(new.headers))
        headers = await run_before(
            hooks.before, Enqueueing(self.queue, task, new, given), hooks.errors
        )
        return _with_headers(new, headers)

    async def _hooked(self, conn: Executor | None, new: NewJob, task: str | None) -> Sent:
        """One job through its hooks, then (traced or not) sent."""
        new = await self._headed(new, task)
        if _tracing.ENABLED and _tracing.on():
            with _tracing.sending(self.queue, task) as span:
                answer = await self._sent(conn, gate_job(_with_headers(new, span.carrier)))
                span.sent(*answer)
            return answer
        return await self._sent(conn, gate_job(new))

    async def _traced_call(
        self,
        conn: Executor | None,
        task: TaskRef,
        args: Sequence[Any],
        kwargs: Mapping[str, Any] | None,
        options: EnqueueOptions | None,
        fields: Mapping[str, Any],
    ) -> Sent:
        """:meth:`enqueue` inside a ``send <queue>`` span whose context the job carries.
        (Its own method: a closure in :meth:`enqueue` would put its variables in cells on
        every call, traced or not.)"""
        with _tracing.sending(self.queue, task.name) as span:
            job = self.gate(task, args, kwargs, options, fields, encode_headers(span.carrier))
            answer = await self._sent(conn, job)
            span.sent(*answer)
        return answer

    async def _sent(self, conn: Executor | None, job: GatedJob) -> Sent:
        if conn is None:
            return await self.coalescer.enqueue(job)
        try:
            (answer,) = await evaluate(conn, enqueue_gated_call(self.queue, [job]))
        except DuplicateJob:  # its job_id is taken: that job's handle
            return job.id, True
        return (job.id, False) if answer is None else (answer.id, answer.deduplicated)

    # -- many jobs --------------------------------------------------------------------

    async def enqueue_many(
        self,
        conn: Pipelined | None,
        task: TaskRef,
        calls: Iterable[Call],
        options: EnqueueOptions | None = None,
        fields: Mapping[str, Any] = _NO_FIELDS,
    ) -> list[Sent]:
        """Gate every call (all before any I/O), then send them in chunks of at most
        ``MAX_ENQUEUE`` jobs and ``config.MAX_BATCH_BYTES`` bytes, one pipelined write on
        ``conn`` (None: the open queue's trio connection).
        Each chunk is one atomic script call; several are not one transaction.

        Raises:
            as :meth:`gate` (for any call: nothing is sent); InvalidArgument: a
                ``job_id`` (one id cannot name many jobs). Then the first chunk's error.
        """
        if (options is not None and options.job_id is not None) or "job_id" in fields:
            raise InvalidArgument("map and starmap enqueue many jobs: a job_id names one")
        hooks = self.hooks
        if hooks is not None and hooks.before:
            news = [self.new_job(task, a, k, options, fields) for a, k in calls]
            for new in news:
                gate_job(new)  # every job's errors before any hook runs or I/O
            news = [await self._headed(new, task.name) for new in news]
            if _tracing.ENABLED and _tracing.on():
                with _tracing.sending(self.queue, task.name) as span:
                    gated = [gate_job(_with_headers(new, span.carrier)) for new in news]
                    answers = await self._send_many(conn, gated)
                    span.sent_many(len(answers))
                return answers
            return await self._send_many(conn, [gate_job(new) for new in news])
        if _tracing.ENABLED and _tracing.on():
            with _tracing.sending(self.queue, task.name) as span:
                carried = encode_headers(span.carrier)
                jobs = [self.gate(task, a, k, options, fields, carried) for a, k in calls]
                answers = await self._send_many(conn, jobs)
                span.sent_many(len(answers))
            return answers
        jobs = [self.gate(task, a, k, options, fields) for a, k in calls]
        return await self._send_many(conn, jobs)

    async def _send_many(self, conn: Pipelined | None, jobs: list[GatedJob]) -> list[Sent]:
        if conn is None:
            conn = self._conn
            if conn is None:
                raise self._not_open()
        if not jobs:
            return []
        chunks = _chunks(jobs)
        sharded = is_sharded(conn)
        calls = [enqueue_gated_call(self.queue, chunk) for chunk in chunks]
        replies = await conn.execute_pipeline([sc.evalsha_args(sharded) for sc in calls])
        answers: list[Sent] = []
        failure: BaseException | None = None
        for sc, chunk, reply in zip(calls, chunks, replies, strict=True):
            try:
                read = await evaluate_reply(conn, sc, reply)
            except Exception as exc:  # every chunk's reply is read; the first error raises
                failure = failure or exc
                continue
            answers += [
                (job.id, False) if answer is None else (answer.id, answer.deduplicated)
                for job, answer in zip(chunk, read, strict=True)
            ]
        if failure is not None:
            raise failure
        return answers

    # -- flows ------------------------------------------------------------------------------

    async def add_flow(self, conn: Executor, roots: Sequence[FlowJob]) -> None:
        """Add a flow's trees (their jobs gated by :meth:`new_job`; pages beyond
        ``MAX_FLOW`` nodes, docs/flows.md)."""
        await add_flow(conn, roots)


def _with_headers(new: NewJob, headers: Mapping[str, str]) -> NewJob:
    """``new`` with ``headers`` added to its own (none to add: ``new`` itself)."""
    if not headers:
        return new
    merged = {**decode_headers(new.headers), **headers} if new.headers else headers
    return attrs.evolve(new, headers=encode_headers(merged))


def _chunks(jobs: list[GatedJob]) -> list[list[GatedJob]]:
    """``jobs`` in order, cut under the call's caps (jobs and payload bytes)."""
    chunks: list[list[GatedJob]] = []
    chunk: list[GatedJob] = []
    size = 0
    for job in jobs:
        n = len(job.payload)
        if chunk and (len(chunk) >= v.MAX_ENQUEUE or size + n > config.MAX_BATCH_BYTES):
            chunks.append(chunk)
            chunk, size = [], 0
        chunk.append(job)
        size += n
    chunks.append(chunk)
    return chunks
