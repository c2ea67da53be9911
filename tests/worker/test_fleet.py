"""``echomq worker app:queue --processes N`` (``_worker/fleet.py``): real processes on a
real Redis. A child killed mid-job is replaced and its job comes back and completes; a
SIGTERM drains every child and exits 0 with nothing lost; a child that cannot start
makes the supervisor give up, exit 1."""

from __future__ import annotations

import os
import re
import signal
import socket
from contextlib import AbstractAsyncContextManager
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio
from prometheus_client.parser import text_string_to_metric_families

import echomq
from echomq import admin
from echomq.testing import WorkerProcess, free_port, open_worker_process

from ._runtime import HERE, until

pytestmark = pytest.mark.single_node("supervising processes does not depend on the backend")

STARTED = re.compile(r"worker process (\d+) started \(pid (\d+)\)")


def fleet(
    redis_url: str, queue: str, marks: Path, *args: str, **options: Any
) -> AbstractAsyncContextManager[WorkerProcess]:
    env = {"EMQ_TEST_QUEUE": queue, "EMQ_TEST_LEASE": "2", "EMQ_TEST_MARKS": str(marks)}
    return open_worker_process(
        "_fleet_tasks:queue", url=redis_url, cwd=HERE, env=env, args=args, **options
    )


def started(output: str) -> list[tuple[int, int]]:
    return [(int(i), int(pid)) for i, pid in STARTED.findall(output)]


async def test_a_child_killed_mid_job_is_replaced_and_its_job_completes(
    redis_url: str, queue: str, tmp_path: Path
) -> None:
    q = echomq.Queue(queue, url=redis_url)
    once_slow = q.task(name="once_slow")(_stub)
    with trio.fail_after(60):
        async with (
            q.open(),
            fleet(
                redis_url, queue, tmp_path, "--processes", "2", grace=1, recovery_interval=0.5
            ) as sup,
        ):
            await until(lambda: len(started(sup.output)) == 2, 20)
            handle = await once_slow.delay("a")
            mark = tmp_path / "a"
            await until(mark.exists, 10)
            await until(lambda: mark.read_text() != "", 5)
            victim = int(mark.read_text())
            (index,) = [i for i, pid in started(sup.output) if pid == victim]
            os.kill(victim, signal.SIGKILL)
            line = await sup.wait_for_log(f"worker process {index} exited with killed by SIGKILL")
            assert "restarting it in" in line
            await until(lambda: len(started(sup.output)) == 3, 20)
            runner = await handle.result(timeout=30)  # recovered after its 2 s lease
            assert runner != victim
            replaced = [pid for i, pid in started(sup.output) if i == index]
            assert len(replaced) == 2 and victim == replaced[0]
            info = await handle.info()
            assert info is not None and info.stalled == 1


async def test_sigterm_drains_every_child_and_exits_0(
    redis_url: str, queue: str, tmp_path: Path
) -> None:
    q = echomq.Queue(queue, url=redis_url)
    nap = q.task(name="nap")(_stub)
    with trio.fail_after(60):
        async with (
            q.open(),
            fleet(redis_url, queue, tmp_path, "--processes", "2", concurrency=2, grace=20) as sup,
        ):
            await until(lambda: sup.output.count("worker serving ") == 2, 20)
            handles = [await nap.delay(1.0) for _ in range(12)]
            running: list[str] = []

            async def four_active() -> bool:
                running[:] = [row.id for row in await admin.active_jobs(q.connection, queue)]
                return len(running) >= 4

            await until(four_active, 10)
            sup.send_signal(signal.SIGTERM)
            assert await sup.wait() == 0
            assert sup.output.count("shutting down") == 2
            assert "every worker process stopped cleanly" in sup.output
            states = {}
            for h in handles:
                info = await h.info()
                assert info is not None
                states[h.id] = info.state
            stats = await admin.stats(q.connection, queue)
    assert stats.active == 0
    assert set(states.values()) <= {"completed", "pending"}
    assert all(states[i] == "completed" for i in running)  # drained, not handed back
    assert stats.completed + stats.pending == len(handles)


async def test_a_child_that_cannot_start_makes_the_supervisor_exit_1(
    redis_url: str, queue: str, tmp_path: Path
) -> None:
    env = {"EMQ_TEST_QUEUE": queue, "EMQ_TEST_MARKS": str(tmp_path)}
    with trio.fail_after(90):
        async with open_worker_process(
            "_no_such_module_here:queue",
            url=redis_url,
            cwd=HERE,
            env=env,
            args=("--processes", "2"),
            wait_serving=False,
        ) as sup:
            assert await sup.wait() == 1
    assert "died 5 times in a row" in sup.output
    assert sup.output.count("exited with exit code 2") >= 4  # logged, each with its code
    assert "worker serving" not in sup.output


async def _stub(*args: object) -> None:
    """The producer's side of the children's tasks (only its name is used here)."""


def two_free_ports() -> int:
    """A port P with P + 1 free too (for two children's /metrics)."""
    for _ in range(50):
        port = free_port()
        with socket.socket() as probe:
            try:
                probe.bind(("127.0.0.1", port + 1))
            except OSError:
                continue
        return port
    raise RuntimeError("no two adjacent free ports")


async def test_each_child_serves_its_own_metrics_port(
    redis_url: str, queue: str, tmp_path: Path
) -> None:
    """``--metrics-port P``: child i serves /metrics on P + i, with its own process
    metrics; the jobs each one ran add up to all of them."""
    q = echomq.Queue(queue, url=redis_url)
    nap = q.task(name="nap")(_stub)
    port = two_free_ports()
    with trio.fail_after(60):
        async with (
            q.open(),
            fleet(
                redis_url, queue, tmp_path, "--processes", "2", "--metrics-port", str(port)
            ) as sup,
        ):
            await until(lambda: sup.output.count("worker serving ") == 2, 20)
            for h in [await nap.delay(0.0) for _ in range(10)]:
                await h.result(timeout=10)
            texts = [
                (await trio.to_thread.run_sync(httpx.get, f"http://127.0.0.1:{p}/metrics")).text
                for p in (port, port + 1)
            ]
    done = 0.0
    for text in texts:
        samples = [s for f in text_string_to_metric_families(text) for s in f.samples]
        found = {s.name: s.value for s in samples}
        assert found["echomq_worker_up"] == 1 and found["process_cpu_seconds_total"] > 0
        done += sum(s.value for s in samples if s.name == "echomq_jobs_total")
    assert done == 10
