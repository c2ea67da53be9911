"""Two real worker processes, canary jobs mixed with every trio-misusing poison job
(``_isolation_tasks.py``): every canary completes, every poison job is dead with its
reason, no worker dies; then each worker stops on SIGTERM with exit code 0."""

from __future__ import annotations

import pytest
import trio

import echomq
from echomq import jobs
from echomq._model.codec import JSON
from echomq.errors import JobFailed

from . import _isolation_tasks as poison
from ._runtime import worker_process

TARGET = "_isolation_tasks:queue"
CANARIES = 50
ATTEMPTS = 2


async def _send(conn: echomq.Connection, queue: str, task: str, *args: object) -> str:
    payload = JSON.encode_call(task, args, {})
    return await jobs.enqueue(conn, queue, payload, max_attempts=ATTEMPTS)


async def test_canaries_complete_beside_poison_jobs_and_the_workers_stop_cleanly(
    redis_url: str, queue: str
) -> None:
    q = echomq.Queue(queue, url=redis_url)
    names = sorted(poison.POISON)
    canaries: dict[str, int] = {}
    bad: dict[str, str] = {}
    with trio.fail_after(120):
        async with q.open():
            conn = q.connection
            for n in range(CANARIES):  # the poison spread among the canaries
                if n % (CANARIES // len(names)) == 0 and len(bad) < len(names):
                    name = names[len(bad)]
                    bad[name] = await _send(conn, queue, name)
                canaries[await _send(conn, queue, "canary", n, poison.LEAK)] = n + 1
            async with (
                worker_process(redis_url, queue, target=TARGET, concurrency=4) as one,
                worker_process(redis_url, queue, target=TARGET, concurrency=4) as two,
            ):
                for job_id, expected in canaries.items():
                    assert await q.handle(job_id).result(timeout=60) == expected
                reasons: dict[str, str] = {}
                for name, job_id in bad.items():
                    with pytest.raises(JobFailed) as caught:
                        await q.handle(job_id).result(timeout=60)
                    reasons[name] = str(caught.value.error)
                infos = [await q.handle(job_id).info() for job_id in [*canaries, *bad.values()]]
                alive = (one.returncode, two.returncode)
                codes = (await one.stop(), await two.stop())
    assert alive == (None, None), (one.tail(), two.tail())
    assert codes == (0, 0), (one.tail(), two.tail())
    assert set(bad) == set(names)
    for name, error in reasons.items():
        assert poison.REASONS[name] in error, (name, error)
    assert all(info is not None and info.stalled == 0 for info in infos)
    assert [info.token for info in infos if info is not None] == [1] * CANARIES + [ATTEMPTS] * len(
        bad
    )
    for proc in (one, two):
        assert "Cancel scope stack corrupted" not in proc.output
        assert "handed" not in proc.output.split("SIGTERM")[0]  # nothing handed back early


async def test_a_worker_whose_own_nursery_a_job_cancels_exits_non_zero(
    redis_url: str, queue: str
) -> None:
    """A stop nobody asked for is a failure: exit code 1, and the job that caused it is
    left to recovery (its lease cut), not handed back uncounted for the next worker."""
    q = echomq.Queue(queue, url=redis_url)
    with trio.fail_after(60):
        async with q.open():
            job_id = await _send(q.connection, queue, "reach-up")
            async with worker_process(redis_url, queue, target=TARGET, wait_serving=False) as proc:
                code = await proc.wait()
            info = await q.handle(job_id).info()
    assert code == 1, proc.tail()
    assert "no shutdown was asked for" in proc.output
    assert "handed" not in proc.output
    assert info is not None and info.state == "active"  # recovery's, counted as a stall
