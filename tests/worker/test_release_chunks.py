"""Shutdown hands back more held jobs than one ``release`` call may take (docs/lua.md,
rule 8: the batch verbs are capped at ``MAX_HELD`` pairs; the worker splits its hand-back)."""

from __future__ import annotations

import trio

import echomq
from echomq import admin
from echomq._scripts import validate as v
from worker._runtime import serving, until


async def test_shutdown_hands_back_more_jobs_than_one_release_takes(
    redis_url: str, queue: str
) -> None:
    """MAX_HELD + 10 running jobs, no grace: every one is back in pending, none active."""
    q = echomq.Queue(queue, url=redis_url)
    started: list[str] = []
    n = v.MAX_HELD + 10

    @q.task
    async def hang(job: echomq.Job) -> None:
        started.append(job.id)
        await trio.sleep(60)

    with trio.fail_after(20):
        async with q.open():
            for _ in range(n):
                await hang.delay()
            worker = echomq.Worker(q, concurrency=n, grace=0)  # every slot busy
            async with serving(worker):
                await until(lambda: len(started) == n, within=15)
            stats = await admin.stats(q.connection, queue)
    assert (stats.pending, stats.active) == (n, 0)
    assert worker.statistics().released == n
