"""The flow panel's reads (docs/dashboard.md, docs/flows.md): a queue's waiting parents,
and a flow's tree from one of its jobs down, each node with its state.

Rule 1: read-only, through the verbs (``flows.waiting_parents``, ``flows.children``,
``jobs.get_job``), as the rest of the dashboard.
Rule 2: bounded: at most ``MAX_NODES`` nodes and ``MAX_DEPTH`` levels per request; the
children left out are counted in their parent's ``more``.
Rule 3: a child on another queue is read on its queue (the parent's ``:remote`` hash);
a child with no row shows its recorded outcome (``removed``, or a finished child whose
row's retention ended), else ``elsewhere`` (not written yet: its queue's page is still
to come).
"""

from __future__ import annotations

from typing import Any

from .. import flows, jobs
from .._model.flow import ChildOutcome
from .._wire.connection import Connection
from .state import describe_payload

__all__ = ["MAX_DEPTH", "MAX_NODES", "WAITING_SHOWN", "read_flow"]

MAX_NODES = 200
MAX_DEPTH = 8
WAITING_SHOWN = 20


async def read_flow(conn: Connection, queue: str, job_id: str | None) -> dict[str, Any]:
    """``{"waiting": [ids], "tree": node or None}``; a node is ``{id, queue, task, call,
    state, row, children, more}`` plus, for a parent, ``policy, open, kids, failed, held``.

    Raises:
        InvalidKey: a bad queue or id (before any I/O). EchoMQError: the reads failed.
    """
    waiting = await flows.waiting_parents(conn, queue, WAITING_SHOWN)
    tree = None
    if job_id is not None:
        tree = await _node(conn, queue, job_id, None, 0, [MAX_NODES])
    return {"waiting": waiting, "tree": tree}


async def _node(
    conn: Connection,
    queue: str,
    job_id: str,
    outcome: ChildOutcome | None,
    depth: int,
    budget: list[int],
) -> dict[str, Any]:
    budget[0] -= 1
    node: dict[str, Any] = {"id": job_id, "queue": queue, "children": [], "more": 0}
    info = await jobs.get_job(conn, queue, job_id)
    if info is None:
        state = outcome.state if outcome is not None else "elsewhere"
        node.update(task="?", call="", state=state, row=False)
        return node
    task, call = describe_payload(info.payload)
    node.update(task=task, call=call, state=info.state.value, row=True)
    kids = await flows.children(conn, queue, job_id)
    if not kids.kids and not kids.ids:
        return node
    node.update(
        policy=kids.policy, open=kids.open, kids=kids.kids, failed=kids.failed, held=kids.held
    )
    remote = await flows.remote_children(conn, queue, job_id)
    for child, recorded in zip(kids.ids, kids.outcomes, strict=True):
        if budget[0] <= 0 or depth + 1 >= MAX_DEPTH:
            node["more"] += 1
            continue
        where = remote.get(child, queue)
        node["children"].append(await _node(conn, where, child, recorded, depth + 1, budget))
    return node
