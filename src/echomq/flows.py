"""Flows (docs/flows.md): add a tree of parent and child jobs, read a parent's children,
cancel or remove a flow.

Rule 1: a flow of at most ``MAX_FLOW`` (250) nodes is one ``add_flow`` call: all or
nothing. A bigger one is added in pages of 250 (parents first): a parent whose children
continue on a later page is *held* (its ``open`` counts one for the hold) until the page
with its last child releases it, so it can never run on part of its children.
Rule 2: every check that needs no server (ids, the tree's shape, sizes) runs before the
first call; the script checks the rest before its first write.
Rule 3: a child on another queue (docs/flows.md "Across queues") is written by its own
queue's call, after its parent's call (which lists and counts it: a *stub*); the calls go
by hops down the tree (queue changes from the root), so queues may be above and below one
another. Its outcome, or its re-run (``reopen``), reaches the parent through its queue's
outbox, which :func:`relay_outbox` (the worker) relays with ``flow_notify``, idempotent
and order-safe per child and generation, acknowledging an entry only once the parent's
script answered.
Rule 4: cancelling or removing a flow (docs/flows.md "Cancelling a flow") never lets a job
of it start once the verb returns. Its subtree is read first (parents first); then each
queue's part goes in ``flow_cancel`` calls: one atomic call when the whole flow is one
page on one queue (its waiting jobs removed and its running ones signalled together);
otherwise the first call on each queue holds that queue's claims (a lease in the queue's
meta that claim reads, renewed by each call), the pages remove the waiting jobs, and only
once every queue's part is done are the running jobs signalled, each queue's hold
released by its last call. A canceller that dies leaves the hold to lapse by itself.
Rule 5: a flow's ids are made before its first page (``canvas`` compiles the tree, ids
included, before any I/O), and each page counts itself on its root's row (``pages``): a
producer that stops between pages leaves a held root that :func:`held_roots` lists and
:func:`remove_held` removes with its flow.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator, Sequence
from typing import Any

import attrs

from ._model.cancel import MAX_REASON
from ._model.errback import decode_spec, errback_payload
from ._model.flow import ChildFailure, ChildOutcome, Feed, FlowJob, Policy
from ._model.job import NewJob
from ._model.steps import field
from ._model.text import clip, safe_str
from ._scripts import validate as v
from ._scripts.calls import Executor, ScriptCall, evaluate, script_call
from ._scripts.keyspace import Keyspace, check_group, check_id, keyspace, remote_queue
from ._scripts.replies import FlowNotice, check_status, text
from .errors import (
    TRANSIENT,
    DuplicateJob,
    EchoMQError,
    FlowStateError,
    InvalidArgument,
    JobGone,
    NotCancellable,
    ScriptError,
)
from .jobs.lifecycle import _task_name, enqueue_call, expires_arg, new_id

__all__ = [
    "add_flow",
    "add_flow_calls",
    "cancel_flow",
    "flow_cancel_call",
    "flow_held_call",
    "held_roots",
    "HeldRoot",
    "remove_held",
    "HOLD_MS",
    "ChildFailure",
    "ChildOutcome",
    "children",
    "errback_call",
    "Feed",
    "flow_notify_call",
    "flow_results_call",
    "FlowChildren",
    "FlowJob",
    "MAX_RELAY_TRIES",
    "Policy",
    "RELAY_GROUP",
    "relay_outbox",
    "remote_children",
    "remove_flow",
    "Spawn",
    "spawn_children",
    "subtree",
    "wait_children",
    "wait_children_call",
    "waiting_parents",
]

log = logging.getLogger("echomq.flows")


@attrs.frozen
class _Placed:
    node: FlowJob
    parent: FlowJob | None
    page: int
    stub: bool = False  # a child on another queue, listed on its parent's (Rule 3)


def _walk(roots: Sequence[FlowJob]) -> Iterator[tuple[FlowJob, FlowJob | None]]:
    """Every node, parents first (pre-order), with its parent."""
    stack: list[tuple[FlowJob, FlowJob | None]] = [(r, None) for r in reversed(roots)]
    while stack:
        node, parent = stack.pop()
        yield node, parent
        stack.extend((c, node) for c in reversed(node.children))


def _keep(name: str, value: int | None) -> str | int:
    return "" if value is None else v.non_negative_int(name, value, v.MAX_MS)


def _stub_argv(node: FlowJob, parent: FlowJob) -> list[Any]:
    """A child on another queue, as its parent's call lists it (no row there)."""
    return [
        check_id(node.id),
        "",
        0,
        1,
        "",
        "",
        "",
        parent.id,
        node.queue,
        "fail",
        "none",
        "",
        "r",
        "",
        0,
        "",
        "",
    ]


def _node_argv(node: FlowJob, parent: FlowJob | None, kids: int, held: bool) -> list[Any]:
    job = node.job
    parent_queue = "" if parent is None or parent.queue == node.queue else parent.queue
    return [
        check_id(node.id),
        v.payload_bytes(job.payload),
        v.int_in("priority", job.priority, -v.MAX_PRIORITY, v.MAX_PRIORITY),
        v.positive_int("max_attempts", job.max_attempts, v.MAX_ATTEMPTS),
        "" if job.task is None else _task_name(job.task),
        _keep("keep_result_ms", job.keep_result_ms),
        _keep("keep_dead_ms", job.keep_dead_ms),
        "" if parent is None else parent.id,
        parent_queue,
        str(node.policy),
        str(node.feed),
        str(kids) if node.children else "",
        "1" if held else "",
        "" if job.group is None else check_group(job.group),
        v.non_negative_int("delay_ms", job.delay_ms, v.MAX_MS),
        b"" if node.errback is None else v.payload_bytes(node.errback),
        expires_arg(job),
    ]


def _hops(nodes: Sequence[tuple[FlowJob, FlowJob | None]]) -> dict[str, int]:
    """Each node's number of queue changes on its way down from its root (Rule 3): a child
    on another queue than its parent is one more hop down."""
    hops: dict[str, int] = {}
    for node, parent in nodes:  # parents first
        if parent is None:
            hops[node.id] = 0
        else:
            hops[node.id] = hops[parent.id] + (node.queue != parent.queue)
    return hops


@attrs.frozen
class Spawn:
    """A running job that adds children (docs/flows.md "Dynamic children"): its id and
    queue, the token of its claim (the fence), its step's name and record, the policy of
    its children."""

    queue: str
    id: str
    token: int
    step: str
    record: bytes
    policy: Policy = Policy.FAIL


def _queue_calls(
    queue: str, placed_all: list[_Placed], root_of: dict[str, str], spawn: Spawn | None = None
) -> list[ScriptCall[int]]:
    """One queue's pages (Rule 1): its jobs and the stubs of its jobs' remote children;
    each page names its first job's root, whose row (on this queue) counts the pages. A
    spawn's part on its parent's queue is one page, the spawn's fields after it (its
    reply: 0 when an earlier run spawned them)."""
    ks = keyspace(queue)
    size = v.MAX_FLOW
    if spawn is not None and len(placed_all) > size:
        raise InvalidArgument(
            f"a spawn adds at most {size} jobs on its parent's queue, not {len(placed_all)}"
        )
    placed = [attrs.evolve(p, page=i // size) for i, p in enumerate(placed_all)]
    page_of = {p.node.id: p.page for p in placed if not p.stub}
    last_child_page: dict[str, int] = {}
    kids_on_page: dict[tuple[str, int], int] = {}
    for p in placed:
        if p.parent is not None and p.parent.id in page_of:  # its parent is on this queue
            last_child_page[p.parent.id] = p.page
            key = (p.parent.id, p.page)
            kids_on_page[key] = kids_on_page.get(key, 0) + 1
    calls: list[ScriptCall[int]] = []
    pages = placed[-1].page + 1
    for page in range(pages):
        members = [p for p in placed if p.page == page]
        releases = [
            pid for pid, last in last_child_page.items() if last == page and page_of[pid] < page
        ]
        argv: list[Any] = [ks.base, len(members), len(releases), *releases]
        total = 0
        for p in members:
            if p.stub:
                assert p.parent is not None
                argv += _stub_argv(p.node, p.parent)
                continue
            nid = p.node.id
            held = last_child_page.get(nid, page) > page
            row = _node_argv(p.node, p.parent, kids_on_page.get((nid, page), 0), held)
            total += len(row[1])
            argv += row
        v.batch_bytes(total)
        argv.append(root_of[members[0].node.id])
        if spawn is not None:
            argv += [spawn.id, spawn.token, field(spawn.step), spawn.record, str(spawn.policy)]
        count = len(members)
        rows = sum(1 for p in members if not p.stub)

        def read(reply: Any, count: int = count, rows: int = rows) -> int:
            if spawn is not None and reply == 0:
                return 0  # an earlier run spawned them: nothing written
            if spawn is not None and isinstance(reply, int) and reply < 0:
                check_status(reply, f"spawn by job {spawn.id}")  # the job's holder no more
            if reply != count:
                raise ScriptError(f"add_flow: unexpected reply {reply!r}")
            return rows

        keys = [ks.pending, ks.waiting, ks.meta, ks.wake, ks.schedule]
        calls.append(script_call("add_flow", keys, argv, read))
    return calls


def add_flow_calls(roots: Sequence[FlowJob]) -> list[ScriptCall[int]]:
    """The ``add_flow`` calls that write ``roots`` (pages of at most MAX_FLOW nodes per
    queue and hop, in order: a child on another queue after its parent); no I/O.

    Raises:
        InvalidArgument: no node, a parent with a delay.
        DuplicateJob: an id repeats in the tree.
        InvalidKey, PayloadTooLarge: a bad id or payload.
    """
    return _flow_calls(roots, None)


def _flow_calls(roots: Sequence[FlowJob], spawn: Spawn | None) -> list[ScriptCall[int]]:
    if not roots:
        raise InvalidArgument("a flow needs at least one job")
    top: FlowJob | None = None  # a spawn's running parent: not written, its children are
    if spawn is not None:
        top = FlowJob(
            job=NewJob(payload=b"", job_id=check_id(spawn.id)),
            queue=spawn.queue,
            children=tuple(roots),
            policy=spawn.policy,
        )
        roots = [top]
    nodes = list(_walk(roots))
    seen: set[str] = set()
    for node, _ in nodes:
        if node.job.job_id is None:
            raise InvalidArgument("every job of a flow needs its id (FlowJob.job.job_id)")
        if node.id in seen:
            raise DuplicateJob(f"the id {node.id} repeats in the flow")
        if node.job.delay_ms and node.children:
            raise InvalidArgument(
                f"only a flow's leaves can be delayed: {node.id} has children (its run "
                "waits for them)"
            )
        seen.add(node.id)
    # one batch of calls per (hop, queue): a node with the same-queue part of the tree
    # around it, a stub with its parent, a remote child one hop further down, so every
    # parent (and its stubs) is written before its children on other queues, even when
    # the queues are above and below one another (A over B over A)
    hops = _hops(nodes)
    root_of: dict[str, str] = {}
    for node, parent in nodes:  # parents first
        root_of[node.id] = node.id if parent is None else root_of[parent.id]
    batches: dict[tuple[int, str], list[_Placed]] = {}
    if top is not None:  # its children's page comes first, even when all are stubs
        batches[(0, top.queue)] = []
    for node, parent in nodes:
        if node is not top:
            batches.setdefault((hops[node.id], node.queue), []).append(_Placed(node, parent, 0))
        if parent is not None and parent.queue != node.queue:
            where = (hops[parent.id], parent.queue)
            batches.setdefault(where, []).append(_Placed(node, parent, 0, stub=True))
    calls: list[ScriptCall[int]] = []
    for hop, queue in sorted(batches, key=lambda b: b[0]):  # stable: queues as first met
        first = top is not None and (hop, queue) == (0, top.queue)
        calls += _queue_calls(queue, batches[(hop, queue)], root_of, spawn if first else None)
    return calls


async def spawn_children(conn: Executor, spawn: Spawn, roots: Sequence[FlowJob]) -> bool:
    """Add ``roots`` as children of the running job ``spawn.id`` (docs/flows.md "Dynamic
    children"): its queue's part in one call, fenced by its token, that writes its step
    once; then the parts on other queues. Answers False when an earlier run of the job
    spawned them (its step is written): the parts on other queues are sent again, each
    one's ``DuplicateJob`` meaning it was written then, so a run that stopped between
    the calls loses no child.

    Raises:
        InvalidArgument, DuplicateJob, InvalidKey, PayloadTooLarge: before any I/O.
        StaleToken, NotActive, JobGone: the caller no longer holds the job.
    """
    calls = _flow_calls(roots, spawn)
    fresh = True
    for i, call in enumerate(calls):
        try:
            written = await evaluate(conn, call)
        except DuplicateJob:
            if fresh:
                raise
            continue  # written by the earlier run
        if i == 0 and written == 0:
            fresh = False
    return fresh


async def add_flow(conn: Executor, roots: Sequence[FlowJob]) -> int:
    """Write a flow; answer the number of jobs written (a child on another queue counts
    once, not its stub). At most MAX_FLOW nodes on one queue: one atomic call. More:
    pages, each atomic, parents held until their last page (Rule 1); queues one after
    the other (Rule 3).

    Raises:
        EchoMQError: what :func:`add_flow_calls` raises, before any I/O.
        DuplicateJob: an id exists (nothing of that page written).
        FlowStateError: a later page found its parent gone (cancelled or removed while
            the flow was being added).
    """
    calls = add_flow_calls(roots)
    root = roots[0]
    if len(calls) > 1:  # Rule 5: the root is named before the first page goes
        log.info("flows: adding flow %s (queue %s) in %d pages", root.id, root.queue, len(calls))
    written = 0
    for sent, call in enumerate(calls):
        try:
            written += await evaluate(conn, call)
        except BaseException:
            if sent:  # earlier pages stand: a held root waits for the rest
                log.warning("flows: flow %s (queue %s) stopped after %d of %d pages; its root "
                            "stays held: `echomq flows %s --held` lists it, `--remove-held %s` "
                            "removes it", root.id, root.queue, sent, len(calls), root.queue,
                            root.id)  # fmt: skip
            raise
    return written


def wait_children_call(queue: str, job_id: str, token: int) -> ScriptCall[int]:
    """A running job waits for the children it spawned (docs/flows.md "Dynamic
    children"); the reply is 1 (none is open, or under policy ``fail`` one failed: go
    on), 2 (it waits: it left active for ``waiting``) or 0 (a cancel was requested:
    nothing done)."""
    ks = keyspace(queue)
    argv = [check_id(job_id), v.token_str(token), ks.base]

    def read(reply: Any) -> int:
        if reply == 2:
            return 2
        return check_status(reply, f"wait_children of {job_id}")

    return script_call("wait_children", [ks.job(job_id), ks.active, ks.waiting], argv, read)


async def wait_children(conn: Executor, queue: str, job_id: str, token: int) -> int:
    """Run :func:`wait_children_call`.

    Raises:
        InvalidKey: before any I/O. JobGone, StaleToken, NotActive: not the job's holder.
    """
    return await evaluate(conn, wait_children_call(queue, job_id, token))


@attrs.frozen(kw_only=True)
class FlowChildren:
    """A flow parent's children: its policy and feed, counts, and the outcomes (in the
    children's order; None for a child that has not finished)."""

    id: str
    state: str
    policy: str
    feed: str
    kids: int
    open: int
    failed: int
    held: bool
    ids: list[str]
    outcomes: list[ChildOutcome | None]


def flow_results_call(
    queue: str, job_id: str, offset: int = 0, count: int = v.MAX_FLOW_PAGE
) -> ScriptCall[FlowChildren]:
    ks = keyspace(queue)
    v.non_negative_int("offset", offset)
    v.int_in("count", count, 1, v.MAX_FLOW_PAGE)
    keys = [ks.job(job_id), ks.children(job_id), ks.child_results(job_id)]

    def read(reply: Any) -> FlowChildren:
        if reply == -1:
            raise JobGone(f"job {job_id} has no row")
        if not isinstance(reply, list) or len(reply) != 9:
            raise ScriptError(f"flow_results: unexpected reply {reply!r}")
        page = reply[7]
        ids: list[str] = []
        outcomes: list[ChildOutcome | None] = []
        for i in range(0, len(page), 2):
            cid = page[i].decode()
            ids.append(cid)
            outcomes.append(ChildOutcome.read(cid, page[i + 1]) if page[i + 1] else None)
        return FlowChildren(
            id=job_id,
            state=reply[8].decode(),
            policy=reply[0].decode(),
            feed=reply[1].decode(),
            kids=int(reply[2]),
            open=int(reply[3]),
            failed=int(reply[4]),
            held=bool(reply[5]),
            ids=ids,
            outcomes=outcomes,
        )

    return script_call("flow_results", keys, [offset, count], read)


async def children(conn: Executor, queue: str, job_id: str) -> FlowChildren:
    """A flow parent's children and their outcomes, all of them (read in pages of 1000).

    Raises:
        InvalidKey: before any I/O. JobGone: no row.
    """
    first = await evaluate(conn, flow_results_call(queue, job_id))
    ids, outcomes = list(first.ids), list(first.outcomes)
    while len(first.ids) == v.MAX_FLOW_PAGE:
        first = await evaluate(conn, flow_results_call(queue, job_id, len(ids)))
        ids += first.ids
        outcomes += first.outcomes
    return attrs.evolve(first, ids=ids, outcomes=outcomes)


async def waiting_parents(conn: Executor, queue: str, limit: int = 20) -> list[str]:
    """The ids of ``queue``'s waiting flow parents, the longest waiting first (at most
    ``limit``, 1..1000).

    Raises:
        InvalidKey, InvalidArgument: before any I/O.
    """
    v.int_in("limit", limit, 1, 1000)
    ids = await conn.execute("ZRANGE", keyspace(queue).waiting, 0, limit - 1)
    return [i.decode() if isinstance(i, bytes) else str(i) for i in ids]


async def remote_children(conn: Executor, queue: str, job_id: str) -> dict[str, str]:
    """A flow parent's children on other queues: child id -> its queue (empty for none).

    Raises:
        InvalidKey: before any I/O.
    """
    raw = await conn.execute("HGETALL", keyspace(queue).remote_children(job_id))
    # a flat list (RESP2, the trio wire); a mapping from the blocking driver (redis-py)
    pairs = raw.items() if isinstance(raw, dict) else zip(raw[::2], raw[1::2], strict=True)
    return {text(k): remote_queue(v) for k, v in pairs}


async def subtree(conn: Executor, queue: str, job_id: str) -> list[tuple[str, str]]:
    """The jobs of a flow below ``job_id`` (not itself) as ``(queue, id)``, parents before
    their children; a child on another queue, and its own children, on theirs. Walked
    with a list, never by recursion: any depth. Only parents' children are read (a
    child's row says whether it is one, read a batch at a time), so a wide flow costs a
    few round trips, not one per member."""
    out: list[tuple[str, str]] = []
    todo = [(queue, job_id)]
    while todo:
        where, parent = todo.pop(0)
        try:
            kids = await children(conn, where, parent)
        except JobGone:
            continue
        remote = await remote_children(conn, where, parent) if kids.ids else {}
        below = [(remote.get(child, where), child) for child in kids.ids]
        out += below
        todo += await _parents(conn, below)
    return out


async def _parents(conn: Executor, jobs: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """The flow parents among ``jobs`` (a row with a ``kids`` field), in order; pipelined
    per queue in batches when the connection can (``execute_pipeline``)."""
    if not jobs:
        return []
    pipeline = getattr(conn, "execute_pipeline", None)
    found: set[tuple[str, str]] = set()
    by_queue: dict[str, list[str]] = {}
    for where, job in jobs:
        by_queue.setdefault(where, []).append(job)
    for where, ids in by_queue.items():
        ks = keyspace(where)
        for first in range(0, len(ids), v.MAX_FLOW_PAGE):
            batch = ids[first : first + v.MAX_FLOW_PAGE]
            commands = [("HEXISTS", ks.job(i), "kids") for i in batch]
            if pipeline is not None:
                replies = await pipeline(commands)
            else:
                replies = [await conn.execute(*c) for c in commands]
            for job, reply in zip(batch, replies, strict=True):
                if isinstance(reply, Exception):
                    raise reply
                if reply == 1:
                    found.add((where, job))
    return [j for j in jobs if j in found]


# -- cancelling and removing a flow (Rule 4) -------------------------------------------------

HOLD_MS = 5_000  # a claim hold's least length; more for a flow of many pages (_hold_ms)
_PAGE_HOLD_MS = 100  # and this much per page of the whole operation


@attrs.frozen
class _Settled:
    """What one ``flow_cancel`` call did: jobs removed (or signalled), locked jobs left,
    running jobs not yet signalled, and the top job's state ('' when not in the call)."""

    done: int
    locked: int
    running: list[str]
    top: str


def flow_cancel_call(
    queue: str,
    ids: Sequence[str],
    *,
    mode: str = "cancel",
    hold: str = "",
    token: str = "",
    hold_ms: int = HOLD_MS,
    signal: bool = False,
    reason: str | None = None,
    top: str = "",
) -> ScriptCall[_Settled]:
    """One page of a flow's cancel (or removal) on ``queue`` (no I/O): ``hold`` is
    ``take`` (hold the queue's claims for ``hold_ms``, or renew that hold), ``release``
    (end it after this page) or ``''``.

    Raises:
        InvalidKey, InvalidArgument: before any I/O.
    """
    ks = keyspace(queue)
    if mode not in ("cancel", "remove"):
        raise InvalidArgument(f"mode must be cancel or remove, not {mode!r}")
    if hold not in ("", "take", "release"):
        raise InvalidArgument(f"hold must be take, release or '', not {hold!r}")
    v.int_in("ids", len(ids), 0, v.MAX_FLOW)
    v.non_negative_int("hold_ms", hold_ms, v.MAX_MS)
    for i in ids:
        check_id(i)
    if top:
        check_id(top)
    if reason is not None:
        reason = clip(reason if isinstance(reason, str) else safe_str(reason), MAX_REASON)
    keys = [ks.pending, ks.schedule, ks.active, ks.waiting, ks.cancels, ks.meta, ks.wake, ks.holds]
    argv: list[Any] = [
        ks.base,
        mode,
        hold,
        token,
        hold_ms,
        "1" if signal else "",
        "" if reason is None else "1",
        reason or "",
        top,
        len(ids),
        *ids,
    ]

    def read(reply: Any) -> _Settled:
        if reply == -1:
            raise JobGone(f"job {top} has no row")
        if not isinstance(reply, list) or len(reply) != 4 or not isinstance(reply[2], list):
            raise ScriptError(f"flow_cancel: unexpected reply {reply!r}")
        return _Settled(int(reply[0]), int(reply[1]), [text(x) for x in reply[2]], text(reply[3]))

    return script_call("flow_cancel", keys, argv, read)


def _pages(ids: Sequence[str]) -> list[list[str]]:
    size = v.MAX_FLOW
    return [list(ids[i : i + size]) for i in range(0, len(ids), size)]


async def _settle_flow(
    conn: Executor, queue: str, job_id: str, mode: str, reason: str | None
) -> tuple[int, str]:
    """Rule 4: the whole subtree's waiting jobs out, queue by queue, while each queue's
    claims are held; then the running ones signalled (cancel). Answers the jobs removed
    or signalled, and the top job's state before."""
    check_id(job_id)
    members = [(queue, job_id), *await subtree(conn, queue, job_id)]
    by_queue: dict[str, list[str]] = {}
    for where, member in members:  # parents first, the top's queue first
        by_queue.setdefault(where, []).append(member)
    signal_now = mode == "cancel"
    if len(by_queue) == 1 and len(members) <= v.MAX_FLOW:  # one atomic call does it all
        page = await evaluate(
            conn,
            flow_cancel_call(
                queue, by_queue[queue], mode=mode, signal=signal_now, reason=reason, top=job_id
            ),
        )
        return page.done, page.top
    pages = sum(len(_pages(ids)) for ids in by_queue.values())
    hold_ms = HOLD_MS + _PAGE_HOLD_MS * 2 * pages  # the pages, and the signals after them
    token = new_id()
    try:
        return await _held_pages(conn, queue, job_id, by_queue, mode, reason, token, hold_ms)
    except Exception:  # a refusal, a lost connection: release what it held, best effort
        for where in by_queue:
            with contextlib.suppress(Exception):
                await evaluate(conn, flow_cancel_call(where, [], hold="release", token=token))
        raise


async def _held_pages(
    conn: Executor,
    queue: str,
    job_id: str,
    by_queue: dict[str, list[str]],
    mode: str,
    reason: str | None,
    token: str,
    hold_ms: int,
) -> tuple[int, str]:
    signal_now = mode == "cancel"
    done, top_state = 0, ""
    running: dict[str, list[str]] = {}
    for where, ids in by_queue.items():  # each queue's part, held, before any signal
        for page_ids in _pages(ids):
            page = await evaluate(
                conn,
                flow_cancel_call(
                    where,
                    page_ids,
                    mode=mode,
                    hold="take",
                    token=token,
                    hold_ms=hold_ms,
                    reason=reason,
                    top=job_id if where == queue and job_id in page_ids else "",
                ),
            )
            done += page.done
            top_state = top_state or page.top
            running.setdefault(where, []).extend(page.running)
    for where in by_queue:  # then the running jobs signalled, and each hold released
        signal_pages = _pages(running.get(where, [])) or [[]]
        for i, page_ids in enumerate(signal_pages):
            # the top, if it runs, is named again: back in waiting by now (a recovered
            # lease), it is removed and its parent told; gone by now, it is not named
            tops = [job_id, ""] if where == queue and job_id in page_ids else [""]
            for top in tops:
                call = flow_cancel_call(
                    where,
                    page_ids,
                    mode=mode,
                    hold="release" if i == len(signal_pages) - 1 else "take",
                    token=token,
                    hold_ms=hold_ms,
                    signal=signal_now,
                    reason=reason,
                    top=top,
                )
                try:
                    page = await evaluate(conn, call)
                except JobGone:  # the top finished and its row went (nothing written)
                    continue
                done += page.done
                break
    return done, top_state


async def cancel_flow(conn: Executor, queue: str, job_id: str, reason: str | None = None) -> int:
    """Cancel a flow (Rule 4): ``job_id`` and every open job below it, on whichever queue
    it is; finished ones are left as they are. Waiting jobs (pending, scheduled, a waiting
    parent) are removed, finished as cancelled, before any running job is signalled, so
    that no job of the flow starts once this returns. Answers how many jobs were cancelled
    (removed or signalled).

    Raises:
        InvalidKey: before any I/O. JobGone: ``job_id`` has no row.
        NotCancellable: ``job_id`` already finished (its subtree is still cancelled).
    """
    done, top = await _settle_flow(conn, queue, job_id, "cancel", reason)
    if top in ("completed", "dead", "cancelled", "expired"):
        raise NotCancellable(f"not cancellable: the job is {top} (its open subtree is cancelled)")
    return done


async def remove_flow(conn: Executor, queue: str, job_id: str) -> int:
    """Remove a flow (Rule 4): ``job_id`` (forced) and every job below it (on whichever
    queue it is), running ones too, with their rows and logs; no job of it starts once
    this returns. Answers how many rows were removed.

    Raises:
        InvalidKey: before any I/O.
        JobGone: ``job_id`` has no row.
        JobLocked: ``job_id`` is locked (nothing removed); a locked job below it is left
            in place.
    """
    done, _ = await _settle_flow(conn, queue, job_id, "remove", None)
    return done


# -- held roots (Rule 5) ------------------------------------------------------------------------


@attrs.frozen(kw_only=True)
class HeldRoot:
    """A flow root still held for pages of its flow (docs/flows.md "Held roots"): its id,
    how long it has waited (ms, server clock), the pages of its flow written on its queue
    and its children written so far."""

    id: str
    created_at_ms: int
    age_ms: int
    pages: int
    kids: int


def flow_held_call(
    queue: str, offset: int = 0, count: int = v.MAX_FLOW_PAGE
) -> ScriptCall[tuple[int, list[HeldRoot]]]:
    """One page of the waiting set read for held roots: (parents read, the held roots)."""
    ks = keyspace(queue)
    v.non_negative_int("offset", offset)
    v.int_in("count", count, 1, v.MAX_FLOW_PAGE)

    def read(reply: Any) -> tuple[int, list[HeldRoot]]:
        if not isinstance(reply, list) or len(reply) != 3 or not isinstance(reply[2], list):
            raise ScriptError(f"flow_held: unexpected reply {reply!r}")
        now, flat = int(reply[0]), reply[2]
        roots = [
            HeldRoot(
                id=text(flat[i]),
                created_at_ms=int(flat[i + 1]),
                age_ms=max(0, now - int(flat[i + 1])),
                pages=int(flat[i + 2]),
                kids=int(flat[i + 3]),
            )
            for i in range(0, len(flat), 4)
        ]
        return int(reply[1]), roots

    return script_call("flow_held", [ks.waiting], [ks.base, offset, count], read)


async def held_roots(conn: Executor, queue: str, *, limit: int = 100) -> list[HeldRoot]:
    """Rule 5: ``queue``'s held flow roots, the longest waiting first (at most ``limit``,
    1..1000): flows whose producer stopped between two pages (killed, cancelled, its
    connection lost) and that wait for pages that never come. Read in pages of the
    waiting set.

    Raises:
        InvalidKey, InvalidArgument: before any I/O.
    """
    v.int_in("limit", limit, 1, 1000)
    found: list[HeldRoot] = []
    offset = 0
    while len(found) < limit:
        read, roots = await evaluate(conn, flow_held_call(queue, offset))
        found += roots
        if read < v.MAX_FLOW_PAGE:
            break
        offset += read
    return found[:limit]


async def remove_held(conn: Executor, queue: str, job_id: str) -> int:
    """Remove a held root's flow (Rule 4's path, as :func:`remove_flow`): answers the rows
    removed. Refuses a job that is not a held root, so a live flow is not removed by a
    mistyped id.

    Raises:
        InvalidKey: before any I/O. JobGone: no row.
        FlowStateError: the job is not a held root (nothing removed).
    """
    check_id(job_id)
    state, held, parent = await conn.execute(
        "HMGET", keyspace(queue).job(job_id), "state", "held", "parent"
    )
    if state is None:
        raise JobGone(f"job {job_id} has no row")
    if state != b"waiting" or held != b"1" or parent is not None:
        raise FlowStateError(f"job {job_id} is not a held flow root (see flows --held)")
    return await remove_flow(conn, queue, job_id)


# -- across queues: the outbox relay (Rule 3) ---------------------------------------------------

RELAY_GROUP = "relay"
MAX_RELAY_TRIES = 5  # deliveries of an entry the parent's queue refuses, then set aside
# a child's outcomes, and `reopen`: it runs again (reprocessed), its parent waits for it
_STATES = frozenset({"completed", "dead", "cancelled", "removed", "reopen"})


def flow_notify_call(
    parent_queue: str,
    parent: str,
    child: str,
    state: str,
    value: bytes | str = b"",
    gen: int = 0,
) -> ScriptCall[FlowNotice]:
    """Tell ``parent`` (on ``parent_queue``) that ``child`` finished as ``state``, or runs
    again (``reopen``), in its generation ``gen`` (how many times it was re-opened);
    idempotent and order-safe per child and generation (``FlowNotice.ALREADY`` for a
    repeat or an older generation).

    Raises:
        InvalidKey: a bad queue or id (before any I/O).
        InvalidArgument: an unknown state, a bad generation (before any I/O).
    """
    ks = keyspace(parent_queue)
    check_id(child)
    if state not in _STATES:
        raise InvalidArgument(f"state must be one of {sorted(_STATES)}, not {state!r}")
    v.non_negative_int("gen", gen)

    def read(reply: Any) -> FlowNotice:
        try:
            return FlowNotice(reply)
        except ValueError:
            raise ScriptError(f"flow_notify: unexpected reply {reply!r}") from None

    return script_call(
        "flow_notify", [ks.job(parent)], [ks.base, parent, child, state, value, gen], read
    )


def errback_call(spec: bytes, failed: str, error: bytes) -> ScriptCall[list[str]]:
    """The enqueue of a dead job's error callback on its own queue (an outbox entry of
    kind ``errback``: docs/flows.md "Error callbacks"); ``DuplicateJob`` when it was
    enqueued already.

    Raises:
        ValueError, EchoMQError: a malformed spec (before any I/O).
    """
    queue, job = decode_spec(spec)
    payload = job.payload if isinstance(job.payload, bytes) else job.payload.encode()
    job = attrs.evolve(job, payload=errback_payload(failed, error.decode(), payload))
    return enqueue_call(queue, [job])


def _fields(raw: Sequence[Any]) -> dict[str, bytes]:
    return {
        (k.decode() if isinstance(k, bytes) else str(k)): v
        for k, v in zip(raw[::2], raw[1::2], strict=True)
    }


async def _ensure_relay_group(conn: Executor, outbox: str) -> bool:
    """The relay's consumer group on ``outbox``; False when there is no outbox (no child
    of this queue has ever had a parent on another queue: nothing to relay)."""
    try:
        await conn.execute("XGROUP", "CREATE", outbox, RELAY_GROUP, "0")
    except Exception as exc:  # the server's refusal, as text
        text = str(exc)
        if "BUSYGROUP" in text:
            return True
        if "requires the key to exist" in text or "no such key" in text.lower():
            return False
        raise
    return True


async def _set_aside(
    conn: Executor, ks: Keyspace, entry_id: Any, raw: Sequence[Any], exc: Exception
) -> bool:
    """An entry the parent's queue refused (a script error, a key of the wrong type):
    True once it was delivered ``MAX_RELAY_TRIES`` times and is now copied, with the
    refusal, to the ``outbox:dead`` stream (the caller deletes and acknowledges it);
    False while it has tries left (it stays pending: XAUTOCLAIM hands it back later).
    Either way the entries after it are relayed: one bad entry never stops the outbox."""
    outbox, dead = ks.outbox, ks.outbox_dead
    pending = await conn.execute("XPENDING", outbox, RELAY_GROUP, entry_id, entry_id, 1)
    tries = int(pending[0][3]) if pending else MAX_RELAY_TRIES
    why = str(exc)[:1024]
    eid = entry_id.decode() if isinstance(entry_id, bytes) else str(entry_id)
    if tries < MAX_RELAY_TRIES:
        log.warning("flows: outbox entry %s of %s refused (try %d of %d): %s",
                    eid, outbox, tries, MAX_RELAY_TRIES, why)  # fmt: skip
        return False
    await conn.execute("XADD", dead, "*", *raw, "entry", eid, "error", why, "tries", tries)
    log.error("flows: outbox entry %s of %s refused %d times: set aside in %s (%s); its "
              "parent does not hear of this child", eid, outbox, tries, dead, why)  # fmt: skip
    return True


async def relay_outbox(
    conn: Executor, queue: str, consumer: str, *, idle_ms: int = 30_000, count: int = 100
) -> int:
    """Relay ``queue``'s outbox to the parents on other queues: entries a consumer took
    and did not acknowledge for ``idle_ms`` (its relay died) first, then new ones; each
    acknowledged and deleted only after ``flow_notify`` answered (a repeat is a no-op).
    An entry ``flow_notify`` refuses stays pending and is tried again; after
    ``MAX_RELAY_TRIES`` deliveries it is set aside in ``outbox:dead`` (logged), so one bad
    entry never holds up the others. Answers the entries relayed (at most ``count`` of
    each kind per call).

    Raises:
        InvalidKey, InvalidArgument: before any I/O.
        ConnectionLost: the entries not yet acknowledged are relayed again later (by this
            worker or another).
    """
    ks = keyspace(queue)
    outbox = ks.outbox
    v.int_in("count", count, 1, 1000)
    v.non_negative_int("idle_ms", idle_ms)
    if not await _ensure_relay_group(conn, outbox):
        return 0
    claimed = await conn.execute(
        "XAUTOCLAIM", outbox, RELAY_GROUP, consumer, idle_ms, "0-0", "COUNT", count
    )
    entries: list[Any] = list(claimed[1]) if claimed else []
    fresh = await conn.execute(
        "XREADGROUP", "GROUP", RELAY_GROUP, consumer, "COUNT", count, "STREAMS", outbox, ">"
    )
    if fresh:
        entries += list(fresh[0][1])
    done = 0
    for entry_id, raw in entries:
        call: ScriptCall[Any] | None = None
        if raw is not None:  # None: deleted after its relay, before its XACK (see below)
            try:
                f = _fields(raw)
                if f.get("kind") == b"errback":  # a dead job's error callback elsewhere
                    call = errback_call(f["spec"], f["failed"].decode(), f["error"])
                else:
                    call = flow_notify_call(
                        f["parent_queue"].decode(),
                        f["parent"].decode(),
                        f["child"].decode(),
                        f["state"].decode(),
                        f.get("value", b""),
                        int(f.get("gen", b"0")),
                    )
            except (KeyError, ValueError, EchoMQError) as exc:  # never relayable: dropped
                log.warning("flows: outbox entry %r of %r is malformed (%s): dropped",
                            entry_id, queue, exc)  # fmt: skip
        if call is not None:
            try:
                await evaluate(conn, call)
            except DuplicateJob:  # an errback enqueued by an earlier delivery
                pass
            except TRANSIENT:
                raise  # nothing acknowledged: relayed again later
            except Exception as exc:  # refused: tried again, then set aside (not blocking)
                if not await _set_aside(conn, ks, entry_id, raw, exc):
                    continue
            else:
                done += 1
        # deleted first, then acknowledged: a relay dying in between leaves a pending id
        # whose entry is gone, which XAUTOCLAIM hands back as None (acknowledged above)
        await conn.execute("XDEL", outbox, entry_id)
        await conn.execute("XACK", outbox, RELAY_GROUP, entry_id)
    return done
