"""The poison-job test: a real worker process, a mix of poison and healthy jobs.

Every healthy job completes, every poison job ends dead with its reason, and the worker
process never exits. The one poison that kills its own process (``os._exit`` inside a
task) cannot be survived; it is bounded instead: the worker is restarted until recovery
dead-letters the job, after ``max_stalled`` recoveries (``reap``) or at the first counted
stall (``stalled``).
"""

from __future__ import annotations

import pytest
import trio

import echomq
from echomq import jobs
from echomq._model.codec import JSON
from echomq.errors import JobFailed

from ._runtime import wait_state, worker_process

TARGET = "_poison_tasks:queue"
LEASE = 0.3
DEEP = b"[" * 5_000 + b"]" * 5_000

# task name -> a fragment of the reason its job must die with
POISON = {
    "deep-result": "result cannot be encoded as JSON: nested too deeply",
    "retry-inf": "Retry: retry requested (not retried: the delay inf is not a finite",
    "retry-soon": "(not retried: the delay 'soon' is not a number of seconds)",
    "retry-far": "(not retried: the delay 1000000000000.0 s is past the cap",
    "backoff-raises": "ValueError: fails once (not retried: backoff raised ZeroDivisionError",
    "backoff-nan": "ValueError: fails once (not retried: backoff(1): nan is not a number",
    "loud": "chars]",
    "unprintable": "Unprintable: <str() failed>",
    "exit": "SystemExit: 3",
    "interrupt": "KeyboardInterrupt",
    "process-exit": "SystemExit: 4",
    "no-such-task": "TaskNotRegistered",
}
# retries allowed on the row (max_attempts is the producer's): these must die anyway
ATTEMPTS = {name: 5 for name in POISON if name.startswith(("retry-", "backoff-"))}


async def send(
    conn: echomq.Connection, queue: str, task: str, *args: object, delay_ms: int = 0
) -> str:
    payload = JSON.encode_call(task, args, {})
    attempts = ATTEMPTS.get(task, 1)
    return await jobs.enqueue(conn, queue, payload, delay_ms=delay_ms, max_attempts=attempts)


async def reason(q: echomq.Queue, job_id: str) -> str:
    with pytest.raises(JobFailed) as caught:
        await q.handle(job_id).result(timeout=60)
    return str(caught.value.error)


async def test_poison_jobs_die_with_their_reason_healthy_jobs_complete(
    redis_url: str, queue: str
) -> None:
    """One worker process, every poison case and healthy jobs: no exit, every job settled."""
    q = echomq.Queue(queue, url=redis_url)
    with trio.fail_after(90):  # the process pool's spawned children start slowly
        async with q.open():
            conn = q.connection
            poison = {name: await send(conn, queue, name) for name in POISON}
            raw = {
                "deep payload": await jobs.enqueue(
                    conn, queue, b'{"task":"ok","args":[' + DEEP + b"]}"
                ),
                "garbage payload": await jobs.enqueue(conn, queue, b"\xff\xfe\x00\x80garbage"),
            }
            replaced = await send(conn, queue, "ok", 1, delay_ms=1_000)
            await jobs.update_data(conn, queue, replaced, b'{"task":"ok","args":[' + DEEP + b"]}")
            raw["update_data"] = replaced
            healthy = {await send(conn, queue, "ok", n): n + 1 for n in range(20)}
            healthy |= {await send(conn, queue, "ok-thread", n): n * 2 for n in range(5)}
            healthy |= {await send(conn, queue, "ok-process", n): n * 3 for n in range(3)}
            async with worker_process(
                redis_url, queue, lease=LEASE, target=TARGET, concurrency=8, recovery_interval=0.2
            ) as proc:
                for job_id, expected in healthy.items():
                    assert await q.handle(job_id).result(timeout=60) == expected
                reasons = {name: await reason(q, job_id) for name, job_id in poison.items()}
                raw_reasons = {name: await reason(q, job_id) for name, job_id in raw.items()}
                # a process task that kills its pool child fails alone (a call running in
                # the same pool would fail too); the next process task gets a fresh pool
                killed = await reason(q, await send(conn, queue, "process-kill"))
                assert (
                    await q.handle(await send(conn, queue, "ok-process", 7)).result(timeout=60)
                    == 21
                )
                assert await q.handle(await send(conn, queue, "ok", 41)).result(timeout=10) == 42
                assert proc.returncode is None, proc.tail()
    for name, fragment in POISON.items():
        assert fragment in reasons[name], (name, reasons[name][:300])
    assert "nested too deeply" in raw_reasons["deep payload"]
    assert "nested too deeply" in raw_reasons["update_data"]
    assert raw_reasons["garbage payload"].startswith("SerializationError")
    assert len(reasons["loud"].encode()) <= 8 * 1024
    assert killed.startswith("BrokenProcessPool")


@pytest.mark.parametrize(("recovery", "deaths"), [("reap", 2), ("stalled", 1)])
async def test_a_job_that_kills_its_worker_is_dead_after_the_bound(
    redis_url: str, queue: str, recovery: str, deaths: int
) -> None:
    """os._exit in a task kills the worker; each restart's recovery counts the stall, and
    the job is dead after the bound (reap: recovered once, dead at its 2nd stall; stalled:
    dead at its 1st). The worker that dead-letters it lives and serves the next job."""
    q = echomq.Queue(queue, url=redis_url)
    options = {"recovery": recovery, "recovery_interval": 0.1, "max_stalled": 1}
    died = 0
    with trio.fail_after(90):
        async with q.open():
            conn = q.connection
            killer = await send(conn, queue, "os-exit")
            for start in range(deaths + 1):
                async with worker_process(
                    redis_url, queue, lease=LEASE, target=TARGET, wait_serving=False, **options
                ) as proc:
                    if start < deaths:
                        with trio.fail_after(30):
                            await proc.wait()
                        assert proc.returncode == 1, proc.tail()
                        died += 1
                        continue
                    info = await wait_state(conn, queue, killer, "dead", within=30)
                    ok = await send(conn, queue, "ok", 1)
                    assert await q.handle(ok).result(timeout=30) == 2
                    assert proc.returncode is None, proc.tail()
    assert died == deaths
    assert info.last_error == "stalled" and info.stalled == deaths
    assert info.token == deaths  # one claim per worker it killed, none after
