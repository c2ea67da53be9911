"""Workers as records, and "blocked" told from "dead".

Each worker writes a heartbeat record from its watchdog thread (which beats whatever its
event loop does); ``admin.list_workers``, ``echomq workers``, ``explain`` and the
dashboard read it. A worker whose loop is blocked (a handler that does not await) is
reported alive but blocked, in which task, and keeps its leases (its job runs once); a
killed one is reported gone.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import trio

import echomq
from echomq import admin, jobs
from echomq.cli import explain_text
from echomq.testing import kill_worker, wait_running

from ._runtime import serving, until, worker_process

LEASE = 0.3


async def _summary(conn: echomq.Connection, queue: str, job_id: str) -> str:
    return explain_text.summary(await jobs.explain(conn, queue, job_id))


async def test_a_worker_keeps_a_record_while_it_serves_and_removes_it_when_it_stops(
    redis_url: str, queue: str
) -> None:
    """The record names the worker (host, pid, version, queue, concurrency), what it holds,
    and its counters; explain names it as the holder; a clean stop removes it."""
    q = echomq.Queue(queue, url=redis_url)
    release = trio.Event()

    @q.task(lease=LEASE)
    async def wait() -> str:
        await release.wait()
        return "done"

    worker = echomq.Worker(q, concurrency=3, heartbeat=0.05)
    with trio.fail_after(10):
        async with q.open():
            async with serving(worker):
                handle = await wait.delay()
                await wait_running(handle)

                async def listed() -> bool:
                    found = await admin.list_workers(q.connection, queue)
                    return bool(found.workers) and found.workers[0].running == (handle.id,)

                await until(listed)
                [record] = (await admin.list_workers(q.connection, queue)).workers
                summary = await _summary(q.connection, queue, handle.id)
                release.set()
                assert await handle.result(timeout=5) == "done"

                async def counted() -> bool:
                    found = await admin.list_workers(q.connection, queue)
                    return found.workers[0].counters["completed"] == 1

                await until(counted)
            assert (await admin.list_workers(q.connection, queue)).workers == []
    assert record.id == worker.id and record.alive and not record.blocked
    assert (record.queues, record.concurrency, record.held) == ((queue,), 3, 1)
    assert record.pid is not None and record.host and record.version
    assert summary.startswith(f"worker {worker.id} ({record.host}, pid {record.pid}) is running it")


async def test_a_blocked_worker_is_alive_and_keeps_its_job_a_dead_one_is_gone(
    redis_url: str, queue: str, tmp_path: Path
) -> None:
    """A handler blocks its worker's loop for 5 s on a 0.3 s lease, another worker standing
    by: the job runs once; meanwhile explain, the record and `echomq workers` say the
    holder is alive but blocked in that task, and its log has the stack. Killed, it is gone.
    The rescuer starts once the holder runs the job (started together, either could claim
    it), while the holder is blocked."""
    runs = tmp_path / "runs"
    options = {"lease": LEASE, "target": "_stop_tasks:queue", "recovery_interval": 0.1}
    q = echomq.Queue(queue, url=redis_url)
    with trio.fail_after(60):
        async with q.open():
            conn = q.connection
            async with worker_process(
                redis_url, queue, tmp_path / "holder.log", "--block-threshold", "0.2", **options
            ) as holder:
                payload = json.dumps({"task": "block-marked", "args": [str(runs), 5.0]})
                handle = q.handle(await jobs.enqueue(conn, queue, payload))
                row = await wait_running(handle)
                async with worker_process(redis_url, queue, tmp_path / "rescuer.log", **options):
                    standing_by = await handle.info()  # the rescuer serves; the holder blocks
                    await holder.wait_for_log("event loop blocked")

                    async def beat_says_blocked() -> bool:
                        e = await jobs.explain(conn, queue, handle.id)
                        return e.holder is not None and e.holder.blocked

                    await until(beat_says_blocked)  # the beat that follows the log line
                    summary = await _summary(conn, queue, handle.id)
                    found = await admin.list_workers(conn, queue)
                    cli = await trio.run_process(
                        [sys.executable, "-m", "echomq", "workers", queue, "--url", redis_url,
                         "--json"],
                        capture_stdout=True,
                    )  # fmt: skip
                    assert await handle.result(timeout=10) == "unblocked"
                    await holder.wait_for_log("event loop ran again")
                # a dead holder: killed while it holds a job (nobody else serves now)
                held = q.handle(await jobs.enqueue(conn, queue, b'{"task":"hold","args":[30]}'))
                await wait_running(held)
                await kill_worker(holder)

                async def gone() -> bool:
                    e = await jobs.explain(conn, queue, held.id)
                    return e.holder is not None and not e.holder.alive

                await until(gone, 10)
                dead_summary = await _summary(conn, queue, held.id)
                info = await handle.info()
                assert info is not None and info.token == 1  # claimed once: not taken over
    holder_id = row.worker
    assert holder_id is not None
    assert summary.startswith(
        f"worker {holder_id} is alive but its event loop has been blocked for "
    ), summary
    assert " in task block-marked: held with token 1" in summary
    [blocked] = [w for w in found.workers if w.id == holder_id]
    assert blocked.alive and blocked.blocked_task == "block-marked"
    assert blocked.blocked_job == handle.id
    listed = {w["id"]: w for w in json.loads(cli.stdout)}
    assert listed[holder_id]["status"].startswith("blocked ")
    assert standing_by is not None and standing_by.state == "active"
    assert runs.read_text().count("\n") == 1  # it ran once
    assert any("time.sleep(seconds)" in line for line in holder.lines)  # the stack
    assert f"worker {holder_id} is gone (no heartbeat for " in dead_summary, dead_summary


async def test_with_no_blocked_lease_limit_recovery_takes_a_blocked_workers_job(
    redis_url: str, queue: str, tmp_path: Path
) -> None:
    """``blocked_lease_limit=0``: the blocked holder's lease lapses, another worker runs the
    job again, and the blocked holder's late complete is refused (one commit)."""
    runs = tmp_path / "runs"
    options = {"lease": LEASE, "target": "_stop_tasks:queue", "recovery_interval": 0.1}
    q = echomq.Queue(queue, url=redis_url)
    with trio.fail_after(60):
        async with q.open():
            conn = q.connection
            async with worker_process(
                redis_url, queue, None, "--blocked-lease-limit", "0", concurrency=1, **options
            ) as holder:
                payload = json.dumps({"task": "block-marked", "args": [str(runs), 1.5]})
                handle = q.handle(await jobs.enqueue(conn, queue, payload))
                await wait_running(handle)
                async with worker_process(redis_url, queue, None, **options):
                    assert await handle.result(timeout=10) == "unblocked"
                    await holder.wait_for_log("settling refused")
                info = await handle.info()
            stats = await admin.stats(conn, queue)
    assert info is not None and info.token == 2  # taken over once
    assert runs.read_text().count("\n") == 2
    assert stats.completed_total == 1
