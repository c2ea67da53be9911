"""The lease keeper (``_worker/lease.py``): a job settled while a renewal was in flight is
not taken for a lost lease (rule 2)."""

from __future__ import annotations

from typing import Any

import echomq
from echomq import jobs
from echomq._worker.cancellation import InFlight
from echomq._worker.lease import LeaseKeeper


class SettlesDuringRenewal:
    """A connection on which the job completes (and its holder starts settling) just before
    the keeper's renewal reaches the server: the race of a completion batch and a tick."""

    def __init__(self, conn: echomq.Connection, settle: Any) -> None:
        self._conn, self._settle = conn, settle

    async def execute(self, *args: Any) -> Any:
        if self._settle is not None:
            settle, self._settle = self._settle, None
            await settle()
        return await self._conn.execute(*args)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._conn, name)


async def test_a_job_settled_while_its_renewal_ran_is_not_lost(
    conn: echomq.Connection, queue: str
) -> None:
    await jobs.enqueue(conn, queue, b"{}")
    (claimed,) = await jobs.claim(conn, queue, 30_000)
    inflight = InFlight(queue)
    held = inflight.add(claimed.id, claimed.token, 30_000)

    async def settle() -> None:
        held.settling = True
        await jobs.complete(conn, queue, claimed.id, claimed.token, b'"ok"')

    keeper = LeaseKeeper(SettlesDuringRenewal(conn, settle), inflight, period=10)  # type: ignore[arg-type]
    await keeper.tick()
    assert held.stop is None  # not lost: its own settlement took it out of active
    info = await jobs.get_job(conn, queue, claimed.id)
    assert info is not None and info.state == "completed"
