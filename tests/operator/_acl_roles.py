"""Each role's work, run through a URL of its own (its ACL user): the scenario of
tests/operator/test_acl.py (docs/operations.md, "Redis ACLs").

``run_roles(urls, ...)`` runs, in one trio run, side by side:

- worker: two workers (queues A and B) serving jobs: results, failures and a retry, a
  delayed job, a dedup window, a flow, a chord whose members run on B (the outbox relay),
  a cooperative cancel and one fenced when its grace runs out (the heartbeat's fence), a
  decorated repeatable and one added by the producer, logs and progress, recovery sweeps;
- producer: enqueues all that (the trio wire, the blocking and the asyncio producers),
  waits every result (``result()``, ``result_sync()``, ``aresult()``), cancels two jobs,
  adds a repeatable;
- operator: the CLI's commands (status, workers, job, explain, retention, limits, groups,
  repeat list/add/pause/resume/remove, enqueue, cancel, remove, reprocess, pause,
  resume, drain, obliterate of a third queue), run as ``echomq ... --url``;
- archive: ``serve_archive`` recording A's and B's finished jobs into SQLite;
- dashboard: ``serve_dashboard`` on A and B, read by a websocket client (snapshot,
  events, a job's logs, a flow).

Every role must finish its work; a refusal anywhere fails the scenario with the error.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import trio
import trio_websocket

import echomq
from _waits import until
from echomq import Job, admin, jobs
from echomq.archive import ArchiveConfig, serve_archive
from echomq.archive.recorder import Archiver
from echomq.cli import main as cli_main
from echomq.dashboard import DashboardInfo, serve_dashboard
from echomq.errors import JobCancelled, JobFailed

ROLES = ("worker", "producer", "operator", "archive", "dashboard")
LIMIT = 60.0  # seconds the whole scenario may take


def make_app(name: str, url: str) -> tuple[echomq.Queue, dict[str, Any]]:
    """Queue ``name`` at ``url`` with the scenario's tasks (the same for every role)."""
    q = echomq.Queue(name, url=url)
    tasks: dict[str, Any] = {}

    @q.task(name="add")
    async def add(x: int, y: int = 0) -> int:
        return x + y

    @q.task(name="total")
    async def total(values: list[Any]) -> int:
        return sum(values)

    @q.task(name="collect")
    async def collect(job: Job) -> list[Any]:
        return list(job.children_results())

    @q.task(name="boom", max_attempts=2, backoff=0.05)
    async def boom() -> None:
        raise ValueError("boom")

    @q.task(name="chatty")
    async def chatty(job: Job) -> str:
        await job.progress(50)
        await job.log("half way")
        return "said"

    @q.task(name="slow")
    async def slow() -> None:
        await trio.sleep_forever()

    @q.task(name="stubborn")
    async def stubborn(job: Job) -> None:
        with job.shielded():  # ignores a cancel: fenced when its grace runs out
            await trio.sleep(1.0)

    @q.task(name="tick", every=0.3)
    async def tick() -> None: ...

    @q.task(name="fan")
    async def fan(job: Job) -> list[Any]:  # dynamic children: spawn, then wait
        await job.spawn([add.s(1), add.s(2)])
        return await job.wait_children()

    @q.task(name="on_error")
    async def on_error(job_id: str, error: str) -> str:
        return error

    tasks.update(add=add, total=total, collect=collect, boom=boom, chatty=chatty, slow=slow)
    tasks.update(stubborn=stubborn, tick=tick, fan=fan, on_error=on_error)
    return q, tasks


def cli(url: str, *argv: str) -> None:
    """``echomq --url URL ARGV`` in this process (a thread: it runs trio itself); it must
    exit 0."""
    code = cli_main(["--url", url, *argv])
    if code != 0:
        raise AssertionError(f"echomq {' '.join(argv)} exited {code}")


async def run_cli(url: str, *argv: str) -> None:
    await trio.to_thread.run_sync(cli, url, *argv)


async def active(handle: echomq.TaskHandle) -> None:
    async def running() -> bool:
        info = await handle.info()
        return info is not None and info.state == "active"

    await until(running, 10)


async def producer(url: str, a: str, b: str, done: dict[str, Any]) -> None:
    qa, ta = make_app(a, url)
    qb, tb = make_app(b, url)
    async with qa.open(), qb.open():
        assert await (await ta["add"].delay(1, 2)).result(timeout=10) == 3
        with_delay = await ta["add"].apply((5,), delay=0.2)
        first = await ta["add"].apply((1,), dedup="once", dedup_for=30)
        again = await ta["add"].apply((1,), dedup="once", dedup_for=30)
        assert again.deduplicated and again.id == first.id
        failing = await ta["boom"].delay()
        chatty = await ta["chatty"].delay()
        flow = await echomq.flow(ta["collect"].s(), [ta["add"].s(1), ta["add"].s(2)]).apply()
        chord = await echomq.chord([tb["add"].s(i, 10) for i in range(3)], ta["total"].s()).apply()
        mid = echomq.chain(ta["add"].s(1), echomq.group(tb["add"].s(1), tb["add"].s(2)))
        mid_group = await mid.apply()  # the group job on B spawns its members there
        fanned = await ta["fan"].delay()
        errback = tb["on_error"].s().set(job_id=f"eb-{a}")  # on B: relayed from A's outbox
        await ta["boom"].s().set(link_error=errback).apply()
        assert await mid_group.result(timeout=15) == [2, 3]
        assert await fanned.result(timeout=10) == [1, 2]
        errback_handle = qb.handle(f"eb-{a}")

        async def enqueued() -> bool:  # (once the dying job's queue relayed it)
            return await errback_handle.info() is not None

        await until(enqueued, 15)
        assert await errback_handle.result(timeout=15) == "ValueError: boom"
        assert await with_delay.result(timeout=10) == 5
        assert await first.result(timeout=10) == 1
        try:
            await failing.result(timeout=10)
            raise AssertionError("boom did not fail")
        except JobFailed:
            pass
        assert await chatty.result(timeout=10) == "said"
        assert sorted(await flow.result(timeout=10)) == [1, 2]
        assert await chord.result(timeout=15) == 33
        # cancel: cooperative, then one fenced by a heartbeat when its grace runs out
        for task, grace in (("slow", None), ("stubborn", 0.2)):
            handle = await ta[task].delay()
            await active(handle)
            await handle.cancel("enough", grace=grace)
            try:
                await handle.result(timeout=10)
                raise AssertionError(f"{task} was not cancelled")
            except JobCancelled:
                pass
        await qa.repeat(ta["add"], every=0.2, args=(7,), key="sevens")
        done.update(dead=failing.id, chatty=chatty.id, flow=flow.id)

        def blocking() -> Any:  # the blocking producer (redis-py)
            handle = ta["add"].delay_sync(20, 22)
            return handle.result_sync(timeout=10)

        assert await trio.to_thread.run_sync(blocking) == 42
        qa.close_sync()

    qs, ts = make_app(a, url)  # the asyncio producer (redis-py's asyncio client)

    async def in_asyncio() -> Any:
        try:
            handle = await ts["add"].adelay(40, 2)
            return await handle.aresult(timeout=10)
        finally:
            await qs.aclose()

    assert await trio.to_thread.run_sync(asyncio.run, in_asyncio()) == 42


async def operator(url: str, a: str, c: str, dead: str, chatty: str) -> None:
    """The CLI's commands on A (and C, a queue it empties and obliterates)."""
    for argv in (
        ("status", a, "--json"),
        ("status",),  # every queue: the scan
        ("workers", a, "--json"),
        ("job", "-q", a, chatty),
        ("explain", "-q", a, chatty),
        ("retention", a),
        ("limits", a),
        ("groups", a),
        ("repeat", "list", a),
        ("repeat", "add", a, "nightly", "add", "[1]", "--cron", "30 2 * * *"),
        ("repeat", "pause", a, "nightly"),
        ("repeat", "resume", a, "nightly"),
        ("repeat", "remove", a, "nightly"),
        ("reprocess", "-q", a, dead),
        ("enqueue", "-q", c, "add", "[0]", "--job-id", "zero", "--create"),  # C is new
        ("pause", c),
        ("enqueue", "-q", c, "add", "[1]", "--job-id", "one"),
        ("cancel", "-q", c, "one"),
        ("enqueue", "-q", c, "add", "[2]", "--job-id", "two"),
        ("remove", "-q", c, "two"),
        ("enqueue", "-q", c, "add", "[3]", "--delay", "60"),
        ("drain", c, "--include-schedule"),
        ("resume", c),
        ("pause", c),
        ("obliterate", c),
    ):
        await run_cli(url, *argv)


async def dashboard(url: str, a: str, b: str, chatty: str, flow: str) -> None:
    async with trio.open_nursery() as nursery:
        info: DashboardInfo = await nursery.start(
            lambda task_status: serve_dashboard(
                url, queues=[a, b], interval=0.1, task_status=task_status
            )
        )
        async with trio_websocket.open_websocket_url(f"ws://127.0.0.1:{info.port}/ws") as ws:
            seen: set[str] = set()
            await ws.send_message(json.dumps({"type": "logs", "ref": 1, "queue": a, "job": chatty}))
            await ws.send_message(json.dumps({"type": "flow", "ref": 2, "queue": a, "job": flow}))
            with trio.fail_after(10):
                while not {"snapshot", "logs-1", "flow-2"} <= seen:
                    message = json.loads(await ws.get_message())
                    kind = message["type"]
                    if kind == "result":
                        assert message["ok"], message
                        kind = f"{'logs' if message['ref'] == 1 else 'flow'}-{message['ref']}"
                    seen.add(kind)
        nursery.cancel_scope.cancel()


async def run_roles(urls: Mapping[str, str], a: str, b: str, c: str, store: Path) -> None:
    """The scenario (module docstring), each role through ``urls[role]``."""
    qa, _ = make_app(a, urls["worker"])
    qb, _ = make_app(b, urls["worker"])
    done: dict[str, Any] = {}
    options = {"heartbeat": 0.1, "recovery_interval": 0.2, "concurrency": 8}
    with trio.fail_after(LIMIT):
        async with trio.open_nursery() as nursery:
            wa, wb = echomq.Worker(qa, **options), echomq.Worker(qb, **options)
            await nursery.start(wa.serve)
            await nursery.start(wb.serve)
            archiver: Archiver = await nursery.start(
                lambda task_status: serve_archive(
                    urls["archive"], [a, b], f"sqlite:///{store}",
                    config=ArchiveConfig(block=0.2), task_status=task_status,
                )
            )  # fmt: skip
            await producer(urls["producer"], a, b, done)
            await until(lambda: wa.statistics().repeats_fired >= 2, 10)
            await operator(urls["operator"], a, c, done["dead"], done["chatty"])
            await dashboard(urls["dashboard"], a, b, done["chatty"], done["flow"])
            await until(lambda: archiver.statistics()[a].archived >= 10, 10)
            wa.shutdown(grace=1)
            wb.shutdown(grace=1)
            nursery.cancel_scope.cancel()
    assert wa.statistics().helper_restarts == 0 and wb.statistics().helper_restarts == 0
    async with echomq.connect(urls["operator"]) as conn:
        assert not await admin.is_paused(conn, a)
        assert await jobs.get_job(conn, a, done["chatty"]) is not None
