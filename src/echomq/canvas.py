"""The canvas (docs/flows.md): chains, groups, chords and flow trees of task signatures.

Rule 1: nothing here does I/O until ``await x.apply()`` (asyncio: ``await x.aapply()``;
blocking code: ``x.apply_sync()``); building a canvas and ``x.flow_jobs()`` check
everything first: an empty group, a step that is not a task signature, a cycle (a canvas
that contains itself), arguments the task's function does not take (``TypeError``; a
chain step and a chord's callback are bound with the result they are fed first) or the
codec cannot encode (``SerializationError``): typed errors before any write. The jobs are
gated, and the flow added, by the queue's ``Producer`` (``_client/producer.py``).
Rule 2: everything compiles to one tree of :class:`~echomq.flows.FlowJob`: a chain step
is the parent of the step before it (``feed=one``: the previous result is its first
argument), a chord's callback the parent of its group's members (``feed=all``: the list
of results is its first argument), a :func:`flow` node the parent of its children
(``feed=none``: it reads them with ``job.children_results()``).
Rule 3: no walk recurses: compiling (:func:`_compile`), finding the queues, and every walk
of the tree after it (``flows.py``) keep their own stack, so a canvas of any depth (a
chain of chains, flows in flows, thousands of levels) compiles, is added, read and
cancelled; the reprs are shallow.
"""

from __future__ import annotations

import asyncio
import contextvars
import datetime as dt
import time
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Generic, TypeVar

import attrs
import trio

from ._model.errback import encode_spec
from ._model.flow import Feed, FlowJob, Policy, mark_parent
from ._model.job import NewJob
from ._model.options import EnqueueOptions, to_ms
from .errors import InvalidArgument, JobCancelled, JobGone
from .flows import cancel_flow
from .jobs.lifecycle import new_id

if TYPE_CHECKING:
    from .handle import TaskHandle
    from .queue import Queue
    from .task import Task

R = TypeVar("R")

_Stack = set[int]  # ids of the canvases being compiled (a cycle check)

__all__ = [
    "Canvas",
    "Chain",
    "Chord",
    "FlowHandle",
    "Group",
    "Node",
    "Signature",
    "chain",
    "chord",
    "flow",
    "group",
]


def _policy(value: object) -> Policy:
    try:
        return Policy(str(value))
    except ValueError:
        raise InvalidArgument(
            f"policy must be one of {[p.value for p in Policy]}, not {value!r}"
        ) from None


# where a compile draws its ids (``flow_jobs(ids=...)``; None: fresh random ones)
_IDS: contextvars.ContextVar[Callable[[], str] | None] = contextvars.ContextVar(
    "echomq_canvas_ids", default=None
)


def _next_id() -> str:
    source = _IDS.get()
    return new_id() if source is None else source()


def _errback(canvas: object) -> Signature[Any] | None:
    """A ``link_error=`` value checked: a task signature, or None."""
    if canvas is None:
        return None
    sig = _as_canvas(canvas, "link_error")
    if not isinstance(sig, Signature):
        raise InvalidArgument("link_error must be a task signature (task.s(...))")
    return sig


class Canvas:
    """What chain, group, chord, flow and a signature share: ``apply()``."""

    policy: Policy = Policy.FAIL
    #: the error callback of the job(s) this canvas compiles to as its root(s)
    #: (docs/flows.md "Error callbacks"); a root with one of its own keeps it
    link_error: Signature[Any] | None = None

    def _parts(self, policy: Policy) -> list[tuple[Canvas, Policy]]:
        """The canvases compiled before this one (Rule 3), each with its policy."""
        raise NotImplementedError

    def _combine(self, policy: Policy, parts: list[_Compiled], compiling: _Stack) -> _Compiled:
        """This canvas's roots, from its parts' (in :meth:`_parts`' order)."""
        raise NotImplementedError

    def flow_jobs(
        self, *, delay: Delay = None, at: At = None, ids: Callable[[], str] | None = None
    ) -> list[FlowJob]:
        """The tree(s) this canvas adds; no I/O (Rule 1). ``delay`` (seconds or a
        timedelta) or ``at`` (a datetime, naive meaning local time, or epoch seconds): the
        flow starts then: its leaves wait in the schedule (a leaf's own delay stays).
        ``ids``: where the jobs' ids come from, in the order of the compile (a spawn's
        are the same in every run of its parent); a ``job_id`` set stays."""
        token = _IDS.set(ids)
        try:
            roots, _ = _compile(self, self.policy, _start_ms(delay, at))
        finally:
            _IDS.reset(token)
        return roots

    async def apply(self, *, delay: Delay = None, at: At = None) -> FlowHandle:
        """Add the whole flow (one atomic call up to 250 jobs; pages beyond, docs/flows.md)
        and answer its handle; ``delay`` / ``at``: when it starts (:meth:`flow_jobs`).

        Raises:
            TypeError, InvalidArgument, SerializationError, DuplicateJob, InvalidKey:
                before any I/O.
            RuntimeError: the queue is not open.
        """
        roots = self.flow_jobs(delay=delay, at=at)
        queue = _queue_of(self)
        await queue.producer.add_flow(queue.connection, roots)
        return self._handle(queue, roots)

    async def aapply(self, *, delay: Delay = None, at: At = None) -> FlowHandle:
        """The asyncio twin of :meth:`apply` (no ``queue.open()``: ``echomq.asyncio``)."""
        roots = self.flow_jobs(delay=delay, at=at)
        queue = _queue_of(self)
        await queue.producer.add_flow(queue.asyncio_client().connection, roots)
        return self._handle(queue, roots)

    def apply_sync(self, *, delay: Delay = None, at: At = None) -> FlowHandle:
        """The blocking twin of :meth:`apply` (``echomq.sync``)."""
        roots = self.flow_jobs(delay=delay, at=at)
        queue = _queue_of(self)
        queue.sync_connection().run(queue.producer.add_flow, roots)
        return self._handle(queue, roots)

    async def delay(self) -> FlowHandle:
        """:meth:`apply` (Celery's spelling)."""
        return await self.apply()

    def _handle(self, queue: Queue, roots: Sequence[FlowJob]) -> FlowHandle:
        known = _queues(self)
        return FlowHandle(
            queue,
            [r.id for r in roots],
            group=isinstance(self, Group),
            queues=[known.get(r.queue, queue) for r in roots],
        )


_Compiled = tuple[list[FlowJob], bool]  # a canvas's roots, and whether it is a group
Delay = float | dt.timedelta | None
At = dt.datetime | float | None


def _start_ms(delay: Delay, at: At) -> int:
    """A flow's start as a delay in ms (0: now), checked as an enqueue's ``delay``/``at``.

    Raises:
        InvalidArgument: both given, or a value out of range.
    """
    if delay is None and at is None:
        return 0
    seconds = delay.total_seconds() if isinstance(delay, dt.timedelta) else delay
    options = EnqueueOptions(delay=seconds, at=at)
    return to_ms("delay", options.delay_seconds())


def _cycle() -> InvalidArgument:
    return InvalidArgument("the flow contains itself (a cycle)")


@attrs.define
class _Frame:
    canvas: Canvas
    policy: Policy
    parts: list[tuple[Canvas, Policy]] | None = None  # set once entered
    done: int = 0  # parts compiled so far


def _compile(canvas: Canvas, policy: Policy, delay_ms: int = 0) -> _Compiled:
    """Rule 3: the canvas's roots, walked with a stack of frames, not by recursion (a
    canvas nested thousands of levels deep compiles as a flat one does). A frame is
    entered (its parts listed), its parts compiled one by one (their results pushed on
    ``results``), then combined; ``compiling`` holds the canvases being compiled, so one
    met again inside itself is a cycle. ``delay_ms``: every leaf's (the flow's start)."""
    compiling: _Stack = set()
    results: list[_Compiled] = []
    work = [_Frame(canvas, policy)]
    while work:
        frame = work[-1]
        c = frame.canvas
        if frame.parts is None:
            if isinstance(c, Signature):
                work.pop()
                leaf = c.node((), frame.policy, delay_ms=delay_ms)
                results.append(([leaf], False))
                continue
            if id(c) in compiling:
                raise _cycle()
            compiling.add(id(c))
            frame.parts = c._parts(frame.policy)
        if frame.done < len(frame.parts):
            part, own = frame.parts[frame.done]
            frame.done += 1
            work.append(_Frame(part, own))
            continue
        n = len(frame.parts)
        got = results[len(results) - n :]
        del results[len(results) - n :]
        roots, was_group = c._combine(frame.policy, got, compiling)
        if c.link_error is not None:
            roots = [_with_errback(r, c.link_error) for r in roots]
        results.append((roots, was_group))
        compiling.discard(id(c))
        work.pop()
    [compiled] = results
    return compiled


def _errback_spec(sig: Signature[Any]) -> bytes:
    """The spec of ``sig`` as an error callback (``_model/errback.py``): bound with two
    stand-ins first, the failed job's id and its error, which the worker passes."""
    task = sig.task
    job = task.queue.producer.new_job(task, ("", "", *sig.args), sig.kwargs, None, sig.options)
    return encode_spec(task.queue.name, attrs.evolve(job, job_id=job.job_id or _next_id()))


def _with_errback(root: FlowJob, sig: Signature[Any]) -> FlowJob:
    if root.errback is not None:
        return root
    return attrs.evolve(root, errback=_errback_spec(sig))


def _as_canvas(step: object, where: str) -> Canvas:
    if isinstance(step, Canvas):
        return step
    from .task import Task

    if isinstance(step, Task):
        return step.s()
    raise InvalidArgument(f"{where} must be a task signature (task.s(...)), not {step!r:.80}")


@attrs.define(eq=False)
class Signature(Canvas, Generic[R]):
    """A task with its arguments and enqueue options, not yet sent: ``task.s(*args)``;
    ``R`` is the task's return type."""

    task: Task[Any, R]
    args: tuple[Any, ...] = ()
    kwargs: Mapping[str, Any] = attrs.field(factory=dict)
    options: Mapping[str, Any] = attrs.field(factory=dict)
    # ``task.si(...)``: a chain step or chord callback that is not given the previous
    # result (it still runs after it)
    immutable: bool = False
    link_error: Signature[Any] | None = None

    def set(self, **options: Any) -> Signature[R]:
        """The same call with these enqueue options (``priority``, ``job_id``,
        ``max_attempts``, ``keep_result``...) and ``link_error=`` (a signature run with
        the job's id and error when it dies: docs/flows.md "Error callbacks")."""
        if "link_error" in options:
            errback = _errback(options.pop("link_error"))
            return attrs.evolve(self, options={**self.options, **options}, link_error=errback)
        return attrs.evolve(self, options={**self.options, **options})

    def _new_job(self, parent: bool, fed: bool, delay_ms: int = 0) -> NewJob:
        task = self.task
        job = task.queue.producer.new_job(task, self.args, self.kwargs, None, self.options, fed=fed)
        if delay_ms and not job.delay_ms:
            job = attrs.evolve(job, delay_ms=delay_ms)
        payload = job.payload if isinstance(job.payload, bytes) else job.payload.encode()
        return attrs.evolve(
            job,
            job_id=job.job_id or _next_id(),
            payload=mark_parent(payload) if parent else payload,
        )

    def node(
        self,
        children: Sequence[FlowJob],
        policy: Policy,
        feed: Feed = Feed.NONE,
        *,
        delay_ms: int = 0,
    ) -> FlowJob:
        if self.immutable:  # run after its children, given none of their results
            feed = Feed.NONE
        job = self._new_job(bool(children), feed is not Feed.NONE, delay_ms)
        return FlowJob(
            job=job,
            queue=self.task.queue.name,
            children=tuple(children),
            policy=policy,
            feed=feed,
            errback=None if self.link_error is None else _errback_spec(self.link_error),
        )

    def _parts(self, policy: Policy) -> list[tuple[Canvas, Policy]]:
        return []

    def _combine(self, policy: Policy, parts: list[_Compiled], compiling: _Stack) -> _Compiled:
        return [self.node((), policy)], False

    def __repr__(self) -> str:
        kind = "si" if self.immutable else "s"
        return f"{self.task.name}.{kind}(*{self.args!r}, **{dict(self.kwargs)!r})"


GROUP_TASK = "echomq.group"  # the built-in task of a group mid-chain (_worker/builtins.py)


GROUP_ATTEMPTS = 5  # a group job's runs are safe to repeat (its spawn is once per job)


def _group_job(payload: bytes) -> NewJob:
    """A group job's row: a flow parent of the built-in task, retried on a failure of its
    own (a lost connection mid-spawn); a dead member still fails it at once."""
    return NewJob(
        payload=mark_parent(payload),
        job_id=_next_id(),
        task=GROUP_TASK,
        max_attempts=GROUP_ATTEMPTS,
    )


def _check_step(step: Canvas, i: int) -> None:
    """A chain step after the first: a task signature, or a group of task signatures."""
    if isinstance(step, Signature):
        return
    if isinstance(step, Group) and all(isinstance(m, Signature) for m in step.members):
        return
    raise InvalidArgument(
        f"chain step {i} must be a task signature or a group of task signatures, not "
        f"{step!r:.80} (a chord or a flow after a step is not supported: docs/flows.md)"
    )


def _mid_group(group: Group, before: list[FlowJob], policy: Policy, was_group: bool) -> FlowJob:
    """A group after a chain step (docs/flows.md "A group in the middle of a chain"): one
    job of the built-in task ``echomq.group``, on its first member's queue, the parent of
    the step before (a group before it: its members, whose list it is given), its call the
    members as ``[fed, spec]`` pairs; its run spawns them and answers their results."""
    members: list[list[Any]] = []
    for m in group.members:
        assert isinstance(m, Signature)
        job = m._new_job(False, not m.immutable)
        members.append([not m.immutable, encode_spec(m.task.queue.name, job)])
    queue = group.members[0]
    assert isinstance(queue, Signature)
    home = queue.task.queue
    if was_group:  # two groups in a row: the one before is first collected by a group job
        before = [_collect(home, before, policy)]
    payload = home.producer.codec.encode_call(GROUP_TASK, (members,), {})
    job = _group_job(payload)
    return FlowJob(job=job, queue=home.name, children=tuple(before), policy=policy)


def _collect(home: Queue, members: list[FlowJob], policy: Policy) -> FlowJob:
    """A group job with no members of its own: it answers its children's results."""
    payload = home.producer.codec.encode_call(GROUP_TASK, ([],), {})
    job = _group_job(payload)
    return FlowJob(job=job, queue=home.name, children=tuple(members), policy=policy)


@attrs.define(eq=False, init=False, repr=False)
class Chain(Canvas):
    """Steps run one after the other, each given the previous step's result first."""

    steps: list[Canvas]
    policy: Policy
    link_error: Signature[Any] | None = None

    def __init__(self, *steps: object, policy: str = "fail", link_error: object = None) -> None:
        if not steps:
            raise InvalidArgument("a chain needs at least one step")
        self.steps = [_as_canvas(s, f"chain step {i + 1}") for i, s in enumerate(steps)]
        for i, step in enumerate(self.steps[1:], 2):
            _check_step(step, i)
        self.policy = _policy(policy)
        self.link_error = _errback(link_error)

    def _parts(self, policy: Policy) -> list[tuple[Canvas, Policy]]:
        return [(self.steps[0], policy)]

    def _combine(self, policy: Policy, parts: list[_Compiled], compiling: _Stack) -> _Compiled:
        [(roots, was_group)] = parts
        for i, step in enumerate(self.steps[1:], 2):
            if id(step) in compiling:  # itself (or an enclosing canvas): a cycle
                raise _cycle()
            _check_step(step, i)  # (the steps may have changed after __init__)
            if isinstance(step, Group):  # a group mid-chain: one built-in job (builtins.py)
                roots = [_mid_group(step, roots, policy, was_group)]
                was_group = False
                if step.link_error is not None:
                    roots = [_with_errback(roots[0], step.link_error)]
                continue
            assert isinstance(step, Signature)
            feed = Feed.ALL if was_group else Feed.ONE
            roots, was_group = [step.node(roots, policy, feed)], False
        return roots, was_group

    def __repr__(self) -> str:  # shallow: a canvas may be nested thousands of levels deep
        return f"chain(<{len(self.steps)} steps>)"


@attrs.define(eq=False, init=False, repr=False)
class Group(Canvas):
    """Members run in parallel; the group's result is the list of theirs, in order."""

    members: list[Canvas]
    policy: Policy
    link_error: Signature[Any] | None = None

    def __init__(self, *members: object, policy: str = "fail", link_error: object = None) -> None:
        if len(members) == 1 and isinstance(members[0], list | tuple):
            members = tuple(members[0])
        if not members:
            raise InvalidArgument("an empty group")
        self.members = [_as_canvas(m, f"group member {i + 1}") for i, m in enumerate(members)]
        self.policy = _policy(policy)
        self.link_error = _errback(link_error)

    def _parts(self, policy: Policy) -> list[tuple[Canvas, Policy]]:
        return [(m, policy) for m in self.members]

    def _combine(self, policy: Policy, parts: list[_Compiled], compiling: _Stack) -> _Compiled:
        roots: list[FlowJob] = []
        for part, _ in parts:
            roots += part
        return roots, True

    def __repr__(self) -> str:
        return f"group(<{len(self.members)} members>)"


@attrs.define(eq=False, init=False, repr=False)
class Chord(Canvas):
    """A group, then a callback given the list of the group's results first."""

    header: Group
    callback: Signature[Any]
    policy: Policy
    link_error: Signature[Any] | None = None

    def __init__(
        self, header: object, callback: object, *, policy: str = "fail", link_error: object = None
    ) -> None:
        if not isinstance(header, Group):
            header = Group(*header) if isinstance(header, list | tuple) else header
        if not isinstance(header, Group):
            raise InvalidArgument(f"a chord's header must be a group, not {header!r:.80}")
        body = _as_canvas(callback, "a chord's callback")
        if not isinstance(body, Signature):
            raise InvalidArgument("a chord's callback must be a task signature")
        self.header, self.callback, self.policy = header, body, _policy(policy)
        self.link_error = _errback(link_error)

    def _parts(self, policy: Policy) -> list[tuple[Canvas, Policy]]:
        return [(self.header, policy)]

    def _combine(self, policy: Policy, parts: list[_Compiled], compiling: _Stack) -> _Compiled:
        [(members, _)] = parts
        return [self.callback.node(members, policy, Feed.ALL)], False

    def __repr__(self) -> str:
        return f"chord({self.header!r}, {self.callback!r})"


@attrs.define(eq=False, init=False, repr=False)
class Node(Canvas):
    """A parent job and its children (any canvas), of any depth: the parent runs after
    they finished and reads their results with ``job.children_results()``."""

    parent: Signature[Any]
    children: list[Canvas]
    policy: Policy
    link_error: Signature[Any] | None = None

    def __init__(
        self,
        parent: object,
        children: Sequence[object] = (),
        *,
        policy: str = "fail",
        link_error: object = None,
    ) -> None:
        body = _as_canvas(parent, "a flow's parent")
        if not isinstance(body, Signature):
            raise InvalidArgument("a flow's parent must be a task signature")
        if isinstance(children, str | bytes) or not isinstance(children, Sequence):
            raise InvalidArgument("a flow's children must be a list")
        self.parent = body
        self.children = [_as_canvas(c, f"child {i + 1}") for i, c in enumerate(children)]
        self.policy = _policy(policy)
        self.link_error = _errback(link_error)

    def _parts(self, policy: Policy) -> list[tuple[Canvas, Policy]]:
        return [(c, c.policy if isinstance(c, Node) else policy) for c in self.children]

    def _combine(self, policy: Policy, parts: list[_Compiled], compiling: _Stack) -> _Compiled:
        kids: list[FlowJob] = []
        for part, _ in parts:
            kids += part
        return [self.parent.node(kids, self.policy)], False

    def __repr__(self) -> str:
        return f"flow({self.parent!r}, <{len(self.children)} children>)"


def chain(*steps: object, policy: str = "fail", link_error: object = None) -> Chain:
    """``chain(a.s(1), b.s(), c.s())``: a, then b(a's result), then c(b's result).
    ``link_error``: a signature run with the id and error of the chain's last job when it
    dies (under policy ``fail``, a step's death is its death: docs/flows.md)."""
    return Chain(*steps, policy=policy, link_error=link_error)


def group(*members: object, policy: str = "fail", link_error: object = None) -> Group:
    """``group(a.s(1), a.s(2))``: in parallel; the result is the list of results.
    ``link_error``: each member's error callback (a member's own stays)."""
    return Group(*members, policy=policy, link_error=link_error)


def chord(
    header: object, callback: object, *, policy: str = "fail", link_error: object = None
) -> Chord:
    """``chord(group(...), cb.s())``: cb(list of the group's results) after all of them.
    ``link_error``: the callback's error callback."""
    return Chord(header, callback, policy=policy, link_error=link_error)


def flow(
    parent: object,
    children: Sequence[object] = (),
    *,
    policy: str = "fail",
    link_error: object = None,
) -> Node:
    """A parent and its children (signatures, chains, groups, chords, flows).
    ``link_error``: the parent's error callback."""
    return Node(parent, children, policy=policy, link_error=link_error)


def _first_signature(canvas: Canvas) -> Signature[Any]:
    while not isinstance(canvas, Signature):
        if isinstance(canvas, Chain):
            canvas = canvas.steps[-1]
        elif isinstance(canvas, Group):
            canvas = canvas.members[0]
        elif isinstance(canvas, Chord):
            canvas = canvas.callback
        elif isinstance(canvas, Node):
            canvas = canvas.parent
        else:
            raise InvalidArgument(f"not a canvas: {canvas!r:.80}")
    return canvas


def _queue_of(canvas: Canvas) -> Queue:
    return _first_signature(canvas).task.queue


def _queues(canvas: Canvas) -> dict[str, Queue]:
    """Every queue the canvas's signatures name, by name (a group's members may be on
    several: each root's handle reads its own, docs/flows.md "Across queues")."""
    found: dict[str, Queue] = {}
    todo: list[Canvas] = [canvas]
    while todo:
        c = todo.pop()
        if isinstance(c, Signature):
            found.setdefault(c.task.queue.name, c.task.queue)
        elif isinstance(c, Chain):
            todo += c.steps
        elif isinstance(c, Group):
            todo += c.members
        elif isinstance(c, Chord):
            todo += [c.header, c.callback]
        elif isinstance(c, Node):
            todo += [c.parent, *c.children]
    return found


@attrs.define(eq=False)
class FlowHandle:
    """An added flow: ``ids`` its root job(s); ``result()`` the root's result (a group
    with no callback: the list of its members' results, in order)."""

    queue: Queue
    ids: list[str]
    group: bool = False
    queues: list[Queue] | None = None  # each root's queue (None: all on ``queue``)
    _cancelled: list[str | None] = attrs.field(factory=list, init=False)

    @property
    def id(self) -> str:
        """The root job's id (a group's first member)."""
        return self.ids[0]

    async def result(self, timeout: float | None = None) -> Any:  # noqa: ASYNC109 - as TaskHandle
        """Wait for the flow's final result.

        Raises:
            JobFailed, JobCancelled, JobGone, trio.TooSlowError: as ``TaskHandle.result``.
        """
        handles = self._handles()
        try:
            with trio.fail_after(float("inf") if timeout is None else timeout):
                out = [await h.result() for h in handles]
        except JobGone:
            self._if_cancelled()
            raise
        return out if self.group else out[0]

    async def aresult(self, timeout: float | None = None) -> Any:  # noqa: ASYNC109 - as TaskHandle
        """The asyncio twin of :meth:`result` (``TimeoutError`` past ``timeout``)."""
        handles = self._handles()
        try:
            async with asyncio.timeout(timeout):
                out = [await h.aresult() for h in handles]
        except JobGone:
            self._if_cancelled()
            raise
        return out if self.group else out[0]

    def result_sync(self, timeout: float | None = None) -> Any:
        """The blocking twin of :meth:`result` (``TimeoutError`` past ``timeout``)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        out: list[Any] = []
        try:
            for h in self._handles():
                left = None if deadline is None else max(0.0, deadline - time.monotonic())
                out.append(h.result_sync(left))
        except JobGone:
            self._if_cancelled()
            raise
        return out if self.group else out[0]

    async def cancel(self, reason: str | None = None) -> int:
        """Cancel the flow's open jobs (the root(s) and every open job below)."""
        self._cancelled.append(reason)
        done = 0
        for q, root in zip(self._root_queues(), self.ids, strict=True):
            done += await cancel_flow(q.connection, q.name, root, reason)
        return done

    async def acancel(self, reason: str | None = None) -> int:
        """The asyncio twin of :meth:`cancel`."""
        self._cancelled.append(reason)
        done = 0
        for q, root in zip(self._root_queues(), self.ids, strict=True):
            done += await cancel_flow(q.asyncio_client().connection, q.name, root, reason)
        return done

    def cancel_sync(self, reason: str | None = None) -> int:
        """The blocking twin of :meth:`cancel`."""
        self._cancelled.append(reason)
        return sum(
            q.sync_connection().run(cancel_flow, q.name, root, reason)
            for q, root in zip(self._root_queues(), self.ids, strict=True)
        )

    def _handles(self) -> list[TaskHandle[Any]]:
        return [q.handle(i) for q, i in zip(self._root_queues(), self.ids, strict=True)]

    def _if_cancelled(self) -> None:
        """A root has no row: this handle cancelled it (a waiting root is removed)?"""
        if self._cancelled:
            raise JobCancelled(self._cancelled[0], job_id=self.id) from None

    def _root_queues(self) -> list[Queue]:
        return self.queues if self.queues is not None else [self.queue] * len(self.ids)
