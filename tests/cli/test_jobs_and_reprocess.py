"""``echomq jobs`` (``admin.list_jobs``): the ids a state holds, newest first, filtered by
task and bounded; ``echomq reprocess QUEUE --all-dead`` (``admin.reprocess_dead``): every
dead job back to pending, a pipelined batch per round trip, bounded by the dead count at
its start even while jobs keep dying."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import trio

import echomq
from echomq import admin, jobs
from echomq.errors import InvalidArgument, InvalidKey


async def run(url: str, *args: str) -> subprocess.CompletedProcess[bytes]:
    env = {**os.environ, "ECHOMQ_URL": url}
    with trio.fail_after(60):
        return await trio.run_process(
            [sys.executable, "-m", "echomq", *args],
            capture_stdout=True, capture_stderr=True, check=False, env=env,
        )  # fmt: skip


async def kill(conn: echomq.Connection, queue: str, tasks: list[str]) -> list[str]:
    """One dead job per entry of ``tasks`` (in that order of death); answers their ids."""
    ids: list[str] = []
    for start in range(0, len(tasks), 250):
        chunk = tasks[start : start + 250]
        ids += await jobs.enqueue_many(
            conn, queue, [jobs.NewJob(payload=b"{}", task=t) for t in chunk]
        )
    by_id = {}
    while len(by_id) < len(ids):
        for c in await jobs.claim(conn, queue, 60_000, count=250):
            by_id[c.id] = c
    for job_id in ids:  # in enqueue order: the first dies first
        await jobs.fail(conn, queue, job_id, by_id[job_id].token, f"boom {job_id}", dead=True)
    return ids


@pytest.mark.both_backends
async def test_list_jobs_newest_first_oldest_and_by_task(
    redis_url: str, conn: echomq.Connection, queue: str
) -> None:
    ids = await kill(conn, queue, ["a", "b", "a", "b", "a"])
    task_of = dict(zip(ids, ["a", "b", "a", "b", "a"], strict=True))
    page = await admin.list_jobs(conn, queue, "dead")
    order = [r.id for r in page.rows]  # jobs dying in one millisecond tie: by id then
    assert sorted(order) == sorted(ids)
    scores = [r.score for r in page.rows]
    assert scores == sorted(scores, reverse=True)
    assert (page.total, page.examined, page.complete) == (5, 5, True)
    row = page.rows[0]
    assert (row.state, row.task, row.failures) == ("dead", task_of[row.id], 1)
    assert row.last_error == f"boom {row.id}"
    assert row.when_ms == row.finished_at_ms and row.when_ms is not None
    page = await admin.list_jobs(conn, queue, "dead", oldest=True, limit=2)
    assert [r.id for r in page.rows] == order[::-1][:2] and not page.complete
    page = await admin.list_jobs(conn, queue, "dead", task="b")
    assert [r.id for r in page.rows] == [i for i in order if task_of[i] == "b"]
    assert page.complete
    assert (await admin.list_jobs(conn, queue, "dead", task="nope")).rows == []
    pending = await jobs.enqueue(conn, queue, b"{}")
    [row] = (await admin.list_jobs(conn, queue, "pending")).rows
    assert (row.id, row.task, row.when_ms) == (pending, None, row.created_at_ms)


async def test_a_task_filter_reads_past_one_window_and_stops_at_the_scan_bound(
    redis_url: str, conn: echomq.Connection, queue: str
) -> None:
    """1,200 dead jobs, the oldest two of task "rare": a filtered page reads two windows
    of ids (1000 each) and finds both; a limit stops it early."""
    ids = await kill(conn, queue, ["rare", "rare"] + ["common"] * 1198)
    page = await admin.list_jobs(conn, queue, "dead", task="rare")
    assert sorted(r.id for r in page.rows) == sorted(ids[:2])
    assert (page.examined, page.complete) == (1200, True)
    page = await admin.list_jobs(conn, queue, "dead", task="common", limit=3)
    assert len(page.rows) == 3 and page.examined == 1000 and not page.complete


async def test_list_jobs_of_a_group_lane_and_bad_arguments(
    redis_url: str, conn: echomq.Connection, queue: str
) -> None:
    lane = [await jobs.enqueue(conn, queue, b"{}", group="acme") for _ in range(2)]
    flat = await jobs.enqueue(conn, queue, b"{}")
    assert [r.id for r in (await admin.list_jobs(conn, queue, "pending")).rows] == [flat]
    page = await admin.list_jobs(conn, queue, "pending", group="acme", oldest=True)
    assert [r.id for r in page.rows] == lane
    for bad in (
        {"state": "finished"},
        {"state": "dead", "limit": 0},
        {"state": "dead", "limit": admin.MAX_VIEW + 1},
        {"state": "dead", "group": "acme"},
        {"state": "dead", "task": ""},
    ):
        with pytest.raises(InvalidArgument):
            await admin.list_jobs(conn, queue, **bad)  # type: ignore[arg-type]
    with pytest.raises(InvalidKey):
        await admin.list_jobs(conn, "bad queue", "dead")


async def test_jobs_command_json_and_the_pending_in_lanes_note(
    redis_url: str, conn: echomq.Connection, queue: str
) -> None:
    ids = await kill(conn, queue, ["app.send", "app.other"])
    p = await run(redis_url, "jobs", queue, "--state", "dead", "--task", "app.send", "--json")
    assert p.returncode == 0, p.stderr
    got = json.loads(p.stdout)
    assert [j["id"] for j in got["jobs"]] == [ids[0]] and got["total"] == 2
    assert got["jobs"][0]["error"] == f"boom {ids[0]}" and got["complete"] is True
    await jobs.enqueue(conn, queue, b"{}", group="acme")
    p = await run(redis_url, "jobs", queue, "--state", "pending")
    assert p.returncode == 0, p.stderr
    assert f"no pending jobs in {queue}" in p.stdout.decode()
    assert "1 pending jobs wait in group lanes" in p.stdout.decode()
    p = await run(redis_url, "jobs", queue, "--state", "dead", "--limit", "1")
    assert "1 shown, 2 dead in all" in p.stdout.decode()


@pytest.mark.both_backends
async def test_reprocess_all_dead_in_batches_and_by_task(
    redis_url: str, conn: echomq.Connection, queue: str
) -> None:
    ids = await kill(conn, queue, ["a", "b"] * 10)
    seen: list[admin.Reprocessed] = []
    done = await admin.reprocess_dead(conn, queue, task="a", batch=3, on_progress=seen.append)
    assert (done.reprocessed, done.skipped, done.dead_at_start, done.looked) == (10, 0, 20, 20)
    assert len(seen) == 7 and seen[-1] == done  # a round per window of 3 ids: ceil(20 / 3)
    dead = {r.id for r in (await admin.list_jobs(conn, queue, "dead", limit=100)).rows}
    assert dead == set(ids[1::2])
    p = await run(redis_url, "reprocess", queue, "--all-dead", "--batch", "4", "--limit", "6")
    assert p.returncode == 0, p.stderr
    assert p.stdout.decode().strip() == (
        f"reprocessed 6 dead jobs of {queue} (of 10 dead): back in pending"
    )
    p = await run(redis_url, "reprocess", "--all-dead", "-q", queue)
    assert p.stdout.decode().strip().startswith("reprocessed 4 dead jobs")
    stats = await admin.stats(conn, queue)
    assert (stats.dead, stats.pending) == (0, 20)
    p = await run(redis_url, "reprocess", queue, "--all-dead")
    assert (p.returncode, p.stdout.decode().strip()) == (0, f"no dead jobs in {queue}")


async def test_reprocess_all_dead_ends_while_the_jobs_keep_dying(
    redis_url: str, conn: echomq.Connection, queue: str
) -> None:
    """A worker fails every job it gets at once: the bulk run still ends, having looked at
    no more ids than were dead when it began."""
    await kill(conn, queue, ["poison"] * 40)
    stop = trio.Event()
    died_again = 0

    async def poison_worker() -> None:
        nonlocal died_again
        async with echomq.connect(redis_url) as c:
            while not stop.is_set():  # each claim is a round trip: the two interleave
                for job in await jobs.claim(c, queue, 60_000, count=10):
                    await jobs.fail(c, queue, job.id, job.token, "again", dead=True)
                    died_again += 1

    async with trio.open_nursery() as nursery:
        nursery.start_soon(poison_worker)
        with trio.fail_after(30):
            done = await admin.reprocess_dead(conn, queue, batch=1)
        stop.set()
    assert died_again >= 1  # the run met jobs that died again
    assert done.looked == 40 and done.reprocessed + done.skipped == 40


async def test_reprocess_dead_refuses_bad_arguments_before_any_io(
    conn: echomq.Connection, queue: str
) -> None:
    for bad in ({"batch": 0}, {"batch": admin.MAX_REPROCESS_BATCH + 1}, {"limit": 0},
                {"task": ""}):  # fmt: skip
        with pytest.raises(InvalidArgument):
            await admin.reprocess_dead(conn, queue, **bad)  # type: ignore[arg-type]
    assert not await admin.queue_exists(conn, queue)
