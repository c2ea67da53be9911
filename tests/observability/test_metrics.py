"""Prometheus /metrics of a worker (``metrics_port``, ``echomq worker --metrics-port``)
and of the dashboard, scraped over HTTP and read with prometheus-client's own parser."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

import httpx
import pytest
import trio
from prometheus_client.parser import text_string_to_metric_families

import echomq
from _waits import until
from echomq.dashboard import serve_dashboard
from echomq.testing import free_port, open_worker_process

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def scrape(url: str) -> Samples:
    """GET ``url`` and parse it: ``{(sample name, sorted labels): value}``."""
    answer = httpx.get(url, timeout=10)
    assert answer.status_code == 200, answer.text
    assert answer.headers["content-type"].startswith("text/plain; version=0.0.4")
    return samples(text_string_to_metric_families(answer.text))


def samples(families: Iterable[object]) -> Samples:
    found: Samples = {}
    for family in families:
        for s in family.samples:  # type: ignore[attr-defined]
            found[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return found


def value(
    found: dict[tuple[str, tuple[tuple[str, str], ...]], float], name: str, **labels: str
) -> float:
    return found[(name, tuple(sorted(labels.items())))]


def make_queue(name: str, url: str) -> echomq.Queue:
    q = echomq.Queue(name, url=url)

    @q.task(name="add")
    async def add(a: int, b: int) -> int:
        return a + b

    @q.task(name="flaky", max_attempts=2, backoff=0.0)
    async def flaky() -> None:
        raise RuntimeError("always")

    @q.task(name="slow", lease=0.3)
    async def slow() -> str:
        await trio.sleep(0.35)  # the keeper renews its lease (every 0.1 s) meanwhile
        return "done"

    return q


async def test_a_worker_of_several_queues_labels_each_queues_tasks_and_gauges(
    redis_url: str, queue: str
) -> None:
    """One sample per queue and task (the same task name on both is two), and the gauges
    of every queue served."""
    one, two = make_queue(f"{queue}-one", redis_url), make_queue(f"{queue}-two", redis_url)
    worker = echomq.Worker([one, two], concurrency=4, metrics_port=0, grace=0)
    with trio.fail_after(30):
        async with one.open(), two.open(), trio.open_nursery() as nursery:
            await nursery.start(worker.serve)
            assert worker.metrics_address is not None
            host, port = worker.metrics_address
            for q, n in ((one, 2), (two, 3)):
                for handle in [await q.tasks["add"].delay(i, 1) for i in range(n)]:
                    await handle.result(timeout=10)
            found = await trio.to_thread.run_sync(scrape, f"http://{host}:{port}/metrics")
            nursery.cancel_scope.cancel()
    jobs = "echomq_jobs_total"
    assert value(found, jobs, queue=one.name, task="add", outcome="completed") == 2
    assert value(found, jobs, queue=two.name, task="add", outcome="completed") == 3
    assert value(found, "echomq_queue_jobs", queue=one.name, state="completed") == 2
    assert value(found, "echomq_queue_jobs", queue=two.name, state="completed") == 3


async def test_worker_serves_metrics(redis_url: str, queue: str) -> None:
    """Jobs by task and outcome, run-time histograms, retries, lease renewals, queue depth
    per state and worker up, as the library's parser reads them."""
    q = make_queue(queue, redis_url)
    worker = echomq.Worker(q, concurrency=4, metrics_port=0, grace=0)
    with trio.fail_after(30):
        async with q.open(), trio.open_nursery() as nursery:
            await nursery.start(worker.serve)
            assert worker.metrics_address is not None
            host, port = worker.metrics_address
            handles = [await q.tasks["add"].delay(i, 1) for i in range(5)]
            flaky = await q.tasks["flaky"].delay()
            slow = await q.tasks["slow"].delay()
            for handle in handles:
                await handle.result(timeout=10)
            assert await slow.result(timeout=10) == "done"
            with pytest.raises(echomq.JobFailed):
                await flaky.result(timeout=10)
            await q.tasks["add"].apply((1, 1), delay=3600)  # one scheduled
            found = await trio.to_thread.run_sync(scrape, f"http://{host}:{port}/metrics")
            root = await trio.to_thread.run_sync(httpx.get, f"http://{host}:{port}/")
            missing = await trio.to_thread.run_sync(httpx.get, f"http://{host}:{port}/nope")
            nursery.cancel_scope.cancel()
    assert root.status_code == 200 and missing.status_code == 404
    jobs = "echomq_jobs_total"
    assert value(found, jobs, queue=queue, task="add", outcome="completed") == 5
    assert value(found, jobs, queue=queue, task="flaky", outcome="retried") == 1
    assert value(found, jobs, queue=queue, task="flaky", outcome="dead") == 1
    assert value(found, jobs, queue=queue, task="slow", outcome="completed") == 1
    assert value(found, "echomq_retries_total", queue=queue, task="flaky") == 1
    runs = value(found, "echomq_job_run_seconds_count", queue=queue, task="slow")
    assert runs == 1
    assert value(found, "echomq_job_run_seconds_bucket", queue=queue, task="slow", le="0.1") == 0
    assert value(found, "echomq_job_run_seconds_bucket", queue=queue, task="slow", le="0.5") == 1
    assert value(found, "echomq_job_run_seconds_sum", queue=queue, task="slow") >= 0.35
    assert value(found, "echomq_job_run_seconds_count", queue=queue, task="add") == 5
    assert value(found, "echomq_lease_renewals_total", queue=queue) >= 1
    assert value(found, "echomq_worker_up", queue=queue) == 1
    assert value(found, "echomq_queue_jobs", queue=queue, state="scheduled") == 1
    assert value(found, "echomq_queue_jobs", queue=queue, state="completed") == 6
    assert value(found, "echomq_queue_jobs", queue=queue, state="dead") == 1
    assert value(found, "echomq_queue_jobs", queue=queue, state="pending") == 0
    assert value(found, "echomq_stalled_jobs_total", queue=queue, outcome="recovered") == 0
    assert value(found, "echomq_queue_scrape_ok") == 1


async def test_the_wait_histogram_and_the_process_collectors(redis_url: str, queue: str) -> None:
    """``echomq_job_wait_seconds``: a job enqueued 0.5 s (server clock) before any worker
    started waited at least that; a delayed job's wait counts from its run_at, not its
    enqueue. The client library's process, platform and GC collectors are served too."""
    q = make_queue(queue, redis_url)
    worker = echomq.Worker(q, concurrency=4, metrics_port=0, grace=0)
    with trio.fail_after(30):
        async with q.open(), trio.open_nursery() as nursery:
            early = await q.tasks["add"].delay(1, 2)
            info = await early.info()
            assert info is not None and info.created_at is not None
            created = info.created_at

            async def half_a_second_later() -> bool:
                return await echomq.admin.server_now_ms(q.connection) >= created + 500

            await until(half_a_second_later)
            await nursery.start(worker.serve)
            assert await early.result(timeout=10) == 3
            late = await q.tasks["slow"].apply(delay=1.0)
            assert await late.result(timeout=10) == "done"
            assert worker.metrics_address is not None
            host, port = worker.metrics_address
            found = await trio.to_thread.run_sync(scrape, f"http://{host}:{port}/metrics")
            nursery.cancel_scope.cancel()
    wait = "echomq_job_wait_seconds"
    assert value(found, f"{wait}_count", queue=queue, task="add") == 1
    assert value(found, f"{wait}_sum", queue=queue, task="add") >= 0.5
    assert value(found, f"{wait}_bucket", queue=queue, task="add", le="0.25") == 0
    assert value(found, f"{wait}_count", queue=queue, task="slow") == 1
    assert value(found, f"{wait}_sum", queue=queue, task="slow") < 0.9  # from its run_at
    assert value(found, "process_cpu_seconds_total") > 0
    assert value(found, "process_resident_memory_bytes") > 0
    assert ("python_info", ()) not in found  # (it has labels: the version's)
    assert any(name == "python_info" for name, _ in found)
    assert value(found, "python_gc_objects_collected_total", generation="0") >= 0


async def test_metrics_port_in_use_fails_the_start(redis_url: str, queue: str) -> None:
    """A port that cannot be bound fails serve() at start (not a silent worker without it)."""
    q = make_queue(queue, redis_url)
    with trio.socket.socket() as taken:
        await taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        worker = echomq.Worker(q, metrics_port=port)
        with trio.fail_after(20), pytest.raises(BaseException) as failed:
            await worker.serve()
    leaf = failed.value
    while isinstance(leaf, BaseExceptionGroup):
        leaf = leaf.exceptions[0]
    assert isinstance(leaf, OSError)


async def test_worker_command_line_metrics_port(redis_url: str, queue: str, tmp_path: Path) -> None:
    """``echomq worker --metrics-port N`` serves /metrics from the worker process."""
    module = tmp_path / "metrics_app.py"
    module.write_text(
        "import echomq\n"
        f"queue = echomq.Queue({queue!r})\n"
        "@queue.task(name='add')\n"
        "async def add(a, b):\n"
        "    return a + b\n"
    )
    port = free_port()
    q = make_queue(queue, redis_url)
    with trio.fail_after(40):
        async with (
            open_worker_process(
                "metrics_app:queue", url=redis_url, cwd=tmp_path, args=["--metrics-port", str(port)]
            ),
            q.open(),
        ):
            assert await (await q.tasks["add"].delay(2, 2)).result(timeout=10) == 4
            found = await trio.to_thread.run_sync(scrape, f"http://127.0.0.1:{port}/metrics")
    assert value(found, "echomq_jobs_total", queue=queue, task="add", outcome="completed") == 1
    assert value(found, "echomq_worker_up", queue=queue) == 1


async def test_dashboard_serves_queue_metrics(
    nursery: trio.Nursery, conn: echomq.Connection, queue: str
) -> None:
    """The dashboard's /metrics: depth per state and the totals of the queues it follows."""
    await echomq.jobs.enqueue(conn, queue, b'{"task":"x","args":[],"kwargs":{}}')
    await echomq.jobs.enqueue(conn, queue, b'{"task":"x","args":[],"kwargs":{}}', delay_ms=60_000)
    await echomq.admin.pause(conn, queue)
    info = await nursery.start(
        lambda task_status: serve_dashboard(
            conn, token="t-metrics", queues=[queue], interval=0.1, task_status=task_status
        )
    )
    with trio.fail_after(20):
        found = await trio.to_thread.run_sync(scrape, f"{info.url}metrics")
    assert value(found, "echomq_queue_jobs", queue=queue, state="pending") == 1
    assert value(found, "echomq_queue_jobs", queue=queue, state="scheduled") == 1
    assert value(found, "echomq_queue_paused", queue=queue) == 1
    assert value(found, "echomq_queue_completed_total", queue=queue) == 0
    assert value(found, "echomq_queue_expired_total", queue=queue) == 0
