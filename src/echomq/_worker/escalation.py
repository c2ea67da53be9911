"""The escalator: a held job whose cancel grace ran out is fenced, then stopped hard.

Rule 1: a cancel request with a grace arms the job's fence time (``Held.fence_at``; the
held-job table). When it comes and the job has not stopped, the escalator runs
``cancel.fence_due`` (the same verb every worker's heartbeat runs): the job is settled
cancelled in Redis and its token bumped, so whatever the handler does later cannot
commit. A job it fenced is stopped hard (``Held.fence``: a thread abandoned, a process
child killed, an async task's scope cancelled) and never settled by this worker.
Rule 2: a job the call did not fence (the server's clock not there yet, or another worker
fenced it first) is tried again ``retry`` seconds later, until it leaves this worker
(a fence by someone else also reaches it: the ``cancel`` event with ``fenced``, or its
token found stale at the next lease renewal).
Rule 3: this is the precise path of a healthy worker. A blocked or dead holder is covered
by the heartbeats (every worker's, in their watchdog threads): the job is fenced within a
heartbeat of its deadline whatever its holder does.
"""

from __future__ import annotations

import logging
import math

import attrs
import trio

from .. import cancel
from .._scripts.calls import Executor
from ..errors import ConnectionLost
from .cancellation import InFlight

__all__ = ["Escalator"]

log = logging.getLogger("echomq.worker")


@attrs.define(eq=False)
class Escalator:
    conn: Executor  # any queue's keys
    inflight: InFlight
    retry: float  # rule 2: seconds before a job not fenced yet is tried again
    fenced: int = 0  # jobs this worker fenced itself

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        task_status.started()
        while True:
            when = self.inflight.next_fence()
            with trio.move_on_at(math.inf if when is None else when):
                await self.inflight.wait_armed()
                continue  # armed (or moved sooner): read the next time again
            await self.escalate()

    async def escalate(self) -> None:
        """Fence the held jobs whose grace ran out (rule 1)."""
        now = trio.current_time()
        due = self.inflight.due_fences(now)
        if not due:
            return
        fenced: set[tuple[str, str]] = set()
        for queue in sorted({held.queue for held in due}):
            try:
                fenced.update((queue, job) for job in await cancel.fence_due(self.conn, queue))
            except ConnectionLost as exc:
                log.warning("cancel fence: %s; retrying in %.2f s", exc, self.retry)
        for held in due:
            if (held.queue, held.id) in fenced:
                self.fenced += 1
                log.warning(
                    "job %s (%s) did not stop within its cancel grace: fenced (settled "
                    "cancelled, its token bumped) and stopped hard",
                    held.id,
                    held.task,
                )
                held.fence()
            elif held.fence_at is not None:
                held.fence_at = now + self.retry
