"""The lease keeper: one timer renews every held lease in one batch call per tick.

Rule 1: every ``period`` (a third of the shortest lease) the keeper sends
``extend_locks`` for every job this worker holds, by queue and lease length (usually one
queue and one length, so one round trip), in chunks of at most ``CHUNK`` jobs.
Rule 2: an answer other than ``ok`` / ``cancel`` (stale / not_active / gone) means the
lease is lost: the job's scope is cancelled and its outcome is never settled (after a
cancel request it is the cancel's fence: the job is stopped hard, ``Held.lose``). A job
whose outcome the settler took while the call was in flight (``held.settling``) is not
lost: it left active by its own settlement, which answers for it.
Rule 3: ``cancel`` means the lease was renewed and the job's row carries a cancel request
(``echomq.cancel.request``): the request goes to the held-job table exactly as the
cancel event would, so a worker that missed the event stops the job at this checkpoint.
Rule 4: ``ConnectionLost`` and ``Unavailable`` (``errors.TRANSIENT``) are transient: logged,
and the next tick tries again.
Rule 5 (a test hook, ``echomq.testing.freeze_renewal``): while ``frozen`` is set, ticks
renew nothing, so held leases lapse while their jobs run on. One test per tick: no cost
per job.
"""

from __future__ import annotations

import logging
from collections import defaultdict

import attrs
import trio

from .. import jobs
from .._scripts import validate as v
from .._scripts.calls import Executor
from .._scripts.replies import ExtendResult
from ..errors import TRANSIENT
from .cancellation import InFlight, Stop

__all__ = ["LeaseKeeper"]

log = logging.getLogger("echomq.worker")

CHUNK = v.MAX_HELD  # pairs per extend_locks call (the verb's cap)


@attrs.define(eq=False)
class LeaseKeeper:
    conn: Executor  # any queue's keys (one server, or a cluster routing each by its slot)
    inflight: InFlight
    period: float
    ticks: int = 0
    renewed: int = 0  # leases renewed (ok or cancel answers)
    frozen: bool = False  # rule 5

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        task_status.started()
        while True:
            await trio.sleep(self.period)
            if not self.frozen:
                await self.tick()

    async def tick(self) -> None:
        """Renew every held lease once."""
        self.ticks += 1
        by_lease: dict[tuple[str, int], list[tuple[str, int]]] = defaultdict(list)
        for held in self.inflight.held():
            if held.stop not in (Stop.LOST, Stop.SLEPT) and not held.settling:
                by_lease[held.queue, held.lease_ms].append((held.id, held.token))
        for (queue, lease_ms), pairs in by_lease.items():
            for start in range(0, len(pairs), CHUNK):
                chunk = pairs[start : start + CHUNK]
                try:
                    answers = await jobs.extend_locks(self.conn, queue, chunk, lease_ms)
                except TRANSIENT as exc:
                    log.warning("lease keeper: %s; retrying next tick", exc)
                    return
                reasons = getattr(answers, "cancel_reasons", {})
                for job_id, token in chunk:
                    answer = answers.get(job_id)
                    if answer is ExtendResult.OK:
                        self.renewed += 1
                        continue
                    found = self.inflight.get(job_id, queue)
                    if found is None or found.token != token:
                        continue
                    if found.stop in (Stop.LOST, Stop.SLEPT) or found.settling:
                        continue
                    if answer is ExtendResult.CANCEL:
                        self.renewed += 1
                        if found.stop is None:
                            reason = reasons.get(job_id)
                            log.info(
                                "job %s: cancel requested (%s), seen at its lease", job_id, reason
                            )
                            self.inflight.request_cancel(job_id, reason, queue=queue)
                        continue
                    if found.stop is Stop.CANCEL:
                        log.warning(
                            "job %s: %s after its cancel request: fenced (its grace ran "
                            "out); stopping it hard",
                            job_id,
                            answer,
                        )
                    else:
                        log.warning("job %s lost its lease (%s): cancelling it", job_id, answer)
                    found.lose()
