"""kill -9 of worker processes while a 3-level flow runs (issue 14, the fault kit): every
node completes once, the root's result is right. The bigger run is ``python -m
benchmarks flows`` (its ``soak`` part)."""

from __future__ import annotations

from pathlib import Path

import pytest
import trio

import echomq
from echomq._scripts.keyspace import Keyspace
from echomq.testing import kill_worker, open_worker_process, wait_running

from ._chaos_flow_app import register, runs_key

HERE = Path(__file__).parent
APP = "_chaos_flow_app:queue"


async def completions(conn: echomq.Connection, queue: str) -> dict[str, int]:
    """Completed entries per job id on the queue's completions stream."""
    entries = await conn.execute("XRANGE", Keyspace(queue).completions, "-", "+")
    out: dict[str, int] = {}
    for _, fields in entries:
        row = dict(zip(fields[::2], fields[1::2], strict=True))
        if row[b"state"] == b"completed":
            job = row[b"id"].decode()
            out[job] = out.get(job, 0) + 1
    return out


async def started(q: echomq.Queue, tag: str, runs: int = 1) -> None:
    """Wait until the task counted ``runs`` executions of ``tag`` (its body is running)."""
    while int(await q.connection.execute("HGET", runs_key(q.name), tag) or 0) < runs:  # noqa: ASYNC110
        await trio.sleep(0.01)


@pytest.mark.single_node("worker processes on one server; the cluster runs the flow tests")
async def test_kill_9_workers_under_a_3_level_flow_every_node_completes_once(
    redis_url: str, queue: str
) -> None:
    """A chord of 2 chords of 3 leaves: the first worker is killed while a leaf runs, the
    second while a middle callback runs, the third finishes the flow."""
    q = echomq.Queue(queue, url=redis_url)
    t = register(q)
    leaf, total = t["leaf"], t["total"]
    canvas = echomq.chord(
        [
            echomq.chord(
                [leaf.s(k * 3 + i, 0.4).set(job_id=f"l{k}{i}") for i in range(3)],
                total.s(tag=f"m{k}", seconds=0.4).set(job_id=f"m{k}"),
            )
            for k in range(2)
        ],
        total.s(tag="root").set(job_id="root"),
    )
    options = {
        "url": redis_url,
        "cwd": HERE,
        "env": {"EMQ_TEST_QUEUE": queue},
        "concurrency": 2,
        "recovery_interval": 0.1,
        "max_stalled": 5,
    }
    with trio.fail_after(60):
        async with q.open():
            handle = await canvas.apply()
            async with open_worker_process(APP, **options) as first:
                await wait_running(q.handle("l00"))
                await started(q, "leaf:0")
                assert await kill_worker(first) == -9
            async with open_worker_process(APP, **options) as second:
                await wait_running(q.handle("l00"), attempt=2)
                await wait_running(q.handle("m0"))
                await started(q, "m0")
                assert await kill_worker(second) == -9
            async with open_worker_process(APP, **options):
                assert await handle.result(timeout=30) == sum(range(6))
            done = await completions(q.connection, queue)
            raw = await q.connection.execute("HGETALL", runs_key(queue))
    runs = {k.decode(): int(v) for k, v in zip(raw[::2], raw[1::2], strict=True)}
    nodes = [f"l{k}{i}" for k in range(2) for i in range(3)] + ["m0", "m1", "root"]
    assert done == dict.fromkeys(nodes, 1)  # every node completed, once
    assert set(runs) == {f"leaf:{n}" for n in range(6)} | {"m0", "m1", "root"}
    assert runs["leaf:0"] >= 2 and runs["m0"] >= 2  # killed mid-run, run again


@pytest.mark.single_node("worker processes on one server; the cluster runs the flow tests")
async def test_kill_9_between_a_spawn_and_its_wait(redis_url: str, queue: str) -> None:
    """The worker dies after the job spawned its children, before it waited: the
    recovered run spawns nothing again, waits, and answers their results; each child
    completed once."""
    q = echomq.Queue(queue, url=redis_url)
    t = register(q)
    options = {
        "url": redis_url,
        "cwd": HERE,
        "env": {"EMQ_TEST_QUEUE": queue},
        "concurrency": 4,
        "recovery_interval": 0.1,
        "max_stalled": 5,
    }
    row = Keyspace(queue).job("F")
    with trio.fail_after(60):
        async with q.open():
            handle = await t["fanout"].apply((3, 30.0), job_id="F")
            async with open_worker_process(APP, **options) as first:
                while not await q.connection.execute("HEXISTS", row, "kids"):  # noqa: ASYNC110
                    await trio.sleep(0.01)
                assert await kill_worker(first) == -9
            async with open_worker_process(APP, **options):
                assert await handle.result(timeout=30) == 0 + 1 + 2
            done = await completions(q.connection, queue)
            kids = await echomq.flows.children(q.connection, queue, "F")
            runs = int(await q.connection.execute("HGET", runs_key(queue), "fanout"))
    assert len(kids.ids) == 3 and done == dict.fromkeys([*kids.ids, "F"], 1)
    assert runs >= 2  # killed mid-run, run again
