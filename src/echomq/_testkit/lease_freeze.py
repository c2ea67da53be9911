"""Freeze and thaw a worker's lease keeper: its leases lapse while its jobs run on.

The hook (docs/testing.md): ``LeaseKeeper.frozen``, one test per keeper tick (every
third of the shortest lease), nothing per job. An in-process :class:`~echomq.Worker` is
reached directly; a worker process started by :func:`open_worker_process` (which sets
``ECHOMQ_FAULT_HOOKS=1``) through SIGUSR1 (freeze) and SIGUSR2 (thaw), acknowledged on
its log. Without that variable a worker installs no handler for either signal.

After ``freeze_renewal`` returns no renewal starts (one already sent may still land);
``job.checkpoint()`` called by a task still renews that job's lease, as it asks to.
"""

from __future__ import annotations

import signal

from .._worker.worker import Worker
from .worker_process import WorkerProcess, WorkerProcessError

__all__ = ["freeze_renewal", "thaw_renewal"]


async def freeze_renewal(worker: Worker | WorkerProcess) -> None:
    """Stop ``worker``'s lease keeper: its held leases lapse while its jobs run on.

    Recovery then hands the jobs to another holder (a new token); the stale holder's
    complete or fail is refused by the fence when its job ends.

    Raises:
        RuntimeError: an in-process worker that is not serving.
        WorkerProcessError: a worker process that is not serving, or exited.
    """
    await _set(worker, frozen=True)


async def thaw_renewal(worker: Worker | WorkerProcess) -> None:
    """Let the lease keeper renew again (from its next tick). A lapsed lease that no
    sweep collected yet is renewed; one already taken over is lost (the job's scope is
    cancelled, its outcome never settled)."""
    await _set(worker, frozen=False)


async def _set(worker: Worker | WorkerProcess, *, frozen: bool) -> None:
    if isinstance(worker, WorkerProcess):
        if not worker.serving or worker.returncode is not None:
            raise WorkerProcessError(
                f"worker {worker.target} (pid {worker.pid}) is not serving: "
                "open it with wait_serving=True, or await wait_serving() first"
            )
        mark = len(worker.lines)
        worker.send_signal(signal.SIGUSR1 if frozen else signal.SIGUSR2)
        await worker.wait_for_log(f"lease renewal {'frozen' if frozen else 'thawed'}", after=mark)
        return
    keeper = worker._keeper
    if keeper is None or not worker._serving:
        raise RuntimeError("the worker is not serving: start it (nursery.start(worker.serve))")
    keeper.frozen = frozen
