"""The echomq CLI, run as `python -m echomq` in a subprocess against the test redis-server:
output and exit codes (0 done, 1 refused, 2 usage) of every command. The queue commands
(status, retention, job, enqueue, pause/resume, drain, obliterate, remove, reprocess,
explain, cancel, watch) run on the cluster too (marked ``both_backends``)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest
import trio

import echomq
from echomq import admin, jobs
from echomq._scripts.keyspace import Keyspace


async def run(url: str, *args: str) -> subprocess.CompletedProcess[bytes]:
    """Run `python -m echomq ARGS` with ECHOMQ_URL=url; bounded in time."""
    env = {**os.environ, "ECHOMQ_URL": url}
    with trio.fail_after(30):
        return await trio.run_process(
            [sys.executable, "-m", "echomq", *args],
            capture_stdout=True,
            capture_stderr=True,
            check=False,
            env=env,
        )


def out(proc: subprocess.CompletedProcess[bytes]) -> str:
    return proc.stdout.decode()


def err(proc: subprocess.CompletedProcess[bytes]) -> str:
    return proc.stderr.decode()


async def queue_keys(conn: echomq.Connection, queue: str) -> list[bytes]:
    """Every key of the queue (a full SCAN)."""
    keys: list[bytes] = []
    cursor: object = b"0"
    while True:
        cursor, batch = await conn.execute("SCAN", cursor, "MATCH", Keyspace(queue).pattern)
        keys += batch
        if cursor in (b"0", 0):
            return keys


# -- enqueue, job, status ---------------------------------------------------------------------


@pytest.mark.both_backends
async def test_enqueue_prints_id_and_writes_payload(
    redis_url: str, conn: echomq.Connection, queue: str
) -> None:
    """enqueue prints the new id; the row holds {task, args, kwargs}, the task's name and
    the options; --create makes the queue."""
    options = ["--kwargs", '{"subject": "hi"}', "--priority", "3", "--max-attempts", "4"]
    p = await run(
        redis_url, "enqueue", "app.send", '["a@b.c", 2]', "-q", queue, *options, "--create"
    )
    assert p.returncode == 0, err(p)
    job_id = out(p).strip()
    info = await jobs.get_job(conn, queue, job_id)
    assert info is not None and info.state == "pending"
    assert json.loads(info.payload) == {
        "task": "app.send",
        "args": ["a@b.c", 2],
        "kwargs": {"subject": "hi"},
    }
    assert (info.priority, info.max_attempts) == (3, 4)
    assert await conn.execute("HGET", Keyspace(queue).job(job_id), "task") == b"app.send"


async def test_enqueue_with_codec_msgpack_writes_a_msgpack_call(
    redis_url: str, conn: echomq.Connection, queue: str
) -> None:
    """--codec msgpack: the payload is the msgpack codec's, as a msgpack queue's worker
    reads it."""
    from echomq._model.codec import codec_named

    p = await run(
        redis_url, "enqueue", "app.send", '["a@b.c"]', "-q", queue, "--codec", "msgpack", "--create"
    )
    assert p.returncode == 0, err(p)
    info = await jobs.get_job(conn, queue, out(p).strip())
    assert info is not None
    call = codec_named("msgpack").decode_call(info.payload)
    assert (call.task, call.args, call.kwargs) == ("app.send", ("a@b.c",), {})


async def test_enqueue_with_delay_and_job_id_then_duplicate_is_refused(
    redis_url: str, conn: echomq.Connection, queue: str
) -> None:
    """--delay schedules, --job-id names the job; the same id again exits 1 with the reason."""
    p = await run(redis_url, "enqueue", "t", '{"k": 1}', "-q", queue, "--delay", "60",
                  "--job-id", "j-1", "--create")  # fmt: skip
    assert (p.returncode, out(p).strip()) == (0, "j-1")
    info = await jobs.get_job(conn, queue, "j-1")
    assert info is not None and info.state == "scheduled"
    assert json.loads(info.payload)["kwargs"] == {"k": 1}
    p = await run(redis_url, "enqueue", "t", "-q", queue, "--job-id", "j-1")
    assert p.returncode == 1
    assert "already exists" in err(p) and "Traceback" not in err(p)


@pytest.mark.parametrize(
    "argv",
    [
        ["enqueue", "t", "{not json"],
        ["enqueue", "t", "--delay", "-1"],
        ["enqueue", "t", "--job-id", "bad id"],
        ["enqueue", "t", "--priority", "9999"],
        ["obliterate", "q", "--budget", "0"],
        ["obliterate", "q", "--budget", "1001"],
        ["drain", "q", "--budget", "1001"],
        ["job", "bad/id"],
        ["nonsense"],
        [],
    ],
)
async def test_usage_errors_exit_2(redis_url: str, argv: list[str]) -> None:
    """Bad flags, bad JSON, bad names and unknown commands exit 2, without a traceback."""
    p = await run(redis_url, *argv)
    assert p.returncode == 2, (out(p), err(p))
    assert err(p) and "Traceback" not in err(p)


@pytest.mark.both_backends
async def test_status_shows_counts_gate_and_throughput(
    redis_url: str, conn: echomq.Connection, queue: str
) -> None:
    """status QUEUE tables the counts; --json gives them exactly; no queue lists every queue."""
    await jobs.enqueue_many(conn, queue, [jobs.NewJob(payload=b"p") for _ in range(3)])
    [c] = await jobs.claim(conn, queue, 5000)
    await jobs.complete(conn, queue, c.id, c.token, b"r")
    await admin.pause(conn, queue)
    p = await run(redis_url, "status", queue)
    assert p.returncode == 0
    assert queue in out(p) and "paused" in out(p) and "pending" in out(p)
    p = await run(redis_url, "status", queue, "--json")
    [row] = json.loads(out(p))
    assert row["queue"] == queue and row["paused"] is True
    assert (row["pending"], row["completed"], row["completed_total"]) == (2, 1, 1)
    assert row["completed_last_minute"] == 1
    assert sum(row["per_minute"]["completed"]) == 1 and len(row["per_minute"]["dead"]) == 6
    assert row["capped"] == {"completed": 0, "dead": 0, "completions": 0, "cancelled": 0}
    p = await run(redis_url, "status", "--json")
    assert queue in [r["queue"] for r in json.loads(out(p))]


@pytest.mark.both_backends
async def test_retention_shows_and_sets_the_settings(
    redis_url: str, conn: echomq.Connection, queue: str
) -> None:
    """retention QUEUE shows the settings (default or set); flags set them (spans, counts);
    --reset goes back to the default; a bad span is bad input (exit 2)."""
    await admin.ensure_schema(conn, queue)
    p = await run(redis_url, "retention", queue)
    assert p.returncode == 0 and "keep_result" in out(p) and "1d" in out(p)
    p = await run(
        redis_url, "retention", queue, "--keep-result", "1h30m", "--max-dead", "5000", "--json"
    )
    got = json.loads(out(p))
    assert (got["keep_result"], got["max_dead"]) == (5400.0, 5000)
    assert got["explicit"] == ["keep_result", "max_dead"]
    assert (await admin.retention(conn, queue)).keep_result == 5400.0
    p = await run(redis_url, "retention", queue, "--reset", "keep_result", "--json")
    assert json.loads(out(p))["explicit"] == ["max_dead"]
    p = await run(redis_url, "retention", queue, "--keep-dead", "soon")
    assert p.returncode == 2 and "span" in err(p)
    p = await run(redis_url, "retention", queue, "--keep-payload", "off", "--json")
    assert json.loads(out(p))["keep_payload"] is False
    assert (await admin.retention(conn, queue)).keep_payload is False
    p = await run(redis_url, "retention", queue)
    assert p.returncode == 0 and "keep_payload" in out(p) and "off" in out(p)
    p = await run(redis_url, "retention", queue, "--keep-payload", "maybe")
    assert p.returncode == 2 and "on or off" in err(p)


@pytest.mark.both_backends
async def test_job_shows_row_and_logs(redis_url: str, conn: echomq.Connection, queue: str) -> None:
    """job ID prints the row's fields and its log lines; a missing job exits 1."""
    job_id = await jobs.enqueue(conn, queue, b'{"task":"t","args":[],"kwargs":{}}')
    await jobs.add_log(conn, queue, job_id, "first line")
    await jobs.update_progress(conn, queue, job_id, "40")
    p = await run(redis_url, "job", job_id, "-q", queue)
    assert p.returncode == 0
    text = out(p)
    assert "pending" in text and '"task":"t"' in text and "first line" in text and "40" in text
    p = await run(redis_url, "job", "ghost", "-q", queue)
    assert p.returncode == 1 and "no job 'ghost'" in err(p)


# -- queue scope ----------------------------------------------------------------------------


@pytest.mark.both_backends
async def test_pause_resume_drain(redis_url: str, conn: echomq.Connection, queue: str) -> None:
    """pause and resume flip the gate; drain reports how many jobs it deleted."""
    await jobs.enqueue_many(conn, queue, [jobs.NewJob(payload=b"p") for _ in range(2)])
    await jobs.enqueue(conn, queue, b"later", delay_ms=60_000)
    p = await run(redis_url, "pause", queue)
    assert p.returncode == 0 and "paused" in out(p)
    assert await admin.is_paused(conn, queue)
    p = await run(redis_url, "resume", queue)
    assert p.returncode == 0 and not await admin.is_paused(conn, queue)
    p = await run(redis_url, "drain", queue)
    assert p.returncode == 0 and "drained 2 pending" in out(p)
    p = await run(redis_url, "drain", queue, "--include-schedule")
    assert p.returncode == 0 and "drained 1 " in out(p)


@pytest.mark.both_backends
async def test_drain_loops_over_bounded_steps(
    redis_url: str, conn: echomq.Connection, queue: str
) -> None:
    """drain --budget 2 deletes 7 waiting jobs in several calls and reports them all."""
    await jobs.enqueue_many(conn, queue, [jobs.NewJob(payload=b"p") for _ in range(5)])
    await jobs.enqueue_many(conn, queue, [jobs.NewJob(payload=b"p", delay_ms=60_000)] * 2)
    p = await run(redis_url, "drain", queue, "--include-schedule", "--budget", "2")
    assert p.returncode == 0 and "drained 7 pending and scheduled" in out(p), err(p)
    assert (await admin.stats(conn, queue)).jobs == 0


@pytest.mark.both_backends
async def test_obliterate_refusals_then_force(
    redis_url: str, conn: echomq.Connection, queue: str
) -> None:
    """obliterate: 1 when not paused, 1 with jobs in flight, 0 with --force and no key left."""
    await jobs.enqueue_many(conn, queue, [jobs.NewJob(payload=b"p") for _ in range(5)])
    await jobs.claim(conn, queue, 5000)
    p = await run(redis_url, "obliterate", queue)
    assert p.returncode == 1 and "not paused" in err(p)
    await admin.pause(conn, queue)
    p = await run(redis_url, "obliterate", queue)
    assert p.returncode == 1 and "in flight" in err(p) and "--force" in err(p)
    p = await run(redis_url, "obliterate", queue, "--force", "--budget", "2")
    assert p.returncode == 0 and "obliterated" in out(p)
    assert await queue_keys(conn, queue) == []


# -- job scope ------------------------------------------------------------------------------


@pytest.mark.both_backends
async def test_remove_and_locked_remove(
    redis_url: str, conn: echomq.Connection, queue: str
) -> None:
    """remove exits 0 and the row is gone; a locked job exits 1 and stays."""
    a = await jobs.enqueue(conn, queue, b"a")
    b = await jobs.enqueue(conn, queue, b"b")
    await conn.execute("SET", Keyspace(queue).lock(b), "operator")
    p = await run(redis_url, "remove", a, "-q", queue)
    assert p.returncode == 0 and await jobs.get_job(conn, queue, a) is None
    p = await run(redis_url, "remove", b, "-q", queue)
    assert p.returncode == 1 and "lock" in err(p)
    assert await jobs.get_job(conn, queue, b) is not None


@pytest.mark.both_backends
async def test_reprocess_dead_and_refuse_live(
    redis_url: str, conn: echomq.Connection, queue: str
) -> None:
    """reprocess moves a dead job to pending (0); a pending job is refused (1)."""
    job_id = await jobs.enqueue(conn, queue, b"p")
    [c] = await jobs.claim(conn, queue, 5000)
    await jobs.fail(conn, queue, job_id, c.token, "boom", dead=True)
    p = await run(redis_url, "reprocess", job_id, "-q", queue)
    assert p.returncode == 0 and "pending" in out(p)
    info = await jobs.get_job(conn, queue, job_id)
    assert info is not None and info.state == "pending"
    p = await run(redis_url, "reprocess", job_id, "-q", queue)
    assert p.returncode == 1 and "not dead" in err(p)


@pytest.mark.both_backends
async def test_cancel_removes_a_waiting_job(
    redis_url: str, conn: echomq.Connection, queue: str
) -> None:
    """cancel of a pending job prints removed; of a missing one exits 1."""
    job_id = await jobs.enqueue(conn, queue, b"p")
    p = await run(redis_url, "cancel", job_id, "-q", queue, "--reason", "not needed")
    assert p.returncode == 0 and "removed" in out(p)
    assert await jobs.get_job(conn, queue, job_id) is None
    p = await run(redis_url, "cancel", job_id, "-q", queue)
    assert p.returncode == 1 and "no job" in err(p)


async def test_cancel_with_a_grace_fences_a_running_job_and_refuses_a_bad_one(
    redis_url: str, conn: echomq.Connection, queue: str
) -> None:
    """--grace 0 fences a held job (prints fenced); a negative grace exits 2, nothing written."""
    job_id = await jobs.enqueue(conn, queue, b"p")
    await jobs.claim(conn, queue, 60_000)
    p = await run(redis_url, "cancel", job_id, "-q", queue, "--grace", "-1")
    assert p.returncode == 2 and "grace must be >= 0" in err(p)
    info = await jobs.get_job(conn, queue, job_id)
    assert info is not None and info.cancel_requested_at is None
    p = await run(redis_url, "cancel", job_id, "-q", queue, "--grace", "0", "--reason", "stop")
    assert p.returncode == 0 and f"fenced {job_id}" in out(p)
    info = await jobs.get_job(conn, queue, job_id)
    assert info is not None and info.cancel_reason == "stop" and info.cancelled


async def test_workers_lists_the_records_or_says_there_are_none(
    redis_url: str, conn: echomq.Connection, queue: str
) -> None:
    """`echomq workers Q` prints a table of the records (running, blocked, gone); --json."""
    from echomq.admin import workers

    await admin.ensure_schema(conn, queue)
    p = await run(redis_url, "workers", queue)
    assert p.returncode == 0 and "no workers" in out(p)
    beat = workers.WorkerBeat(
        host="box", pid=7, version="0.1.0", queues=(queue,), concurrency=4, lease_ms=300,
        beat_ms=100, held=0, blocked_task="app.resize_image",
    )  # fmt: skip
    await workers.beat(conn, queue, "w-blocked", beat, ttl_ms=60_000, up_ms=1, blocked_ms=2300)
    await workers.beat(conn, queue, "w-fine", beat, ttl_ms=60_000, up_ms=1)
    p = await run(redis_url, "workers", queue)
    assert p.returncode == 0, err(p)
    assert "w-blocked" in out(p) and "w-fine" in out(p) and "running" in out(p)
    p = await run(redis_url, "workers", queue, "--json")
    listed = {w["id"]: w for w in json.loads(out(p))}
    assert listed["w-fine"]["status"] == "running" and listed["w-fine"]["host"] == "box"
    status = listed["w-blocked"]["status"]
    assert re.fullmatch(r"blocked \d+\.\d s in app\.resize_image", status), status


@pytest.mark.both_backends
async def test_explain_prints_summary_and_facts(
    redis_url: str, conn: echomq.Connection, queue: str
) -> None:
    """explain prints the one-line answer and the facts; a missing job exits 1."""
    job_id = await jobs.enqueue(conn, queue, b"p")
    await admin.pause(conn, queue)
    p = await run(redis_url, "explain", job_id, "-q", queue)
    assert p.returncode == 0
    assert "paused" in out(p) and "position" in out(p) and "token" in out(p)
    p = await run(redis_url, "explain", "ghost", "-q", queue)
    assert p.returncode == 1 and "no job 'ghost'" in err(p)


async def test_unreachable_server_exits_1(closed_port_url: str) -> None:
    """A server that cannot be reached is a refusal (1) with the address, not a traceback."""
    p = await run(closed_port_url, "status")
    assert p.returncode == 1, err(p)
    assert "cannot reach Redis" in err(p) and "Traceback" not in err(p)


async def test_worker_target_needs_module_and_queue(redis_url: str) -> None:
    """worker without module:queue is a usage error (2)."""
    p = await run(redis_url, "worker", "no_colon_here")
    assert p.returncode == 2 and "module:queue" in err(p)


# -- watch ----------------------------------------------------------------------------------


@pytest.mark.both_backends
async def test_watch_plain_lines_until_count(
    redis_url: str, conn: echomq.Connection, queue: str
) -> None:
    """watch off a terminal prints one line per event and stops after --count events."""
    job_id = await jobs.enqueue(conn, queue, b"p")
    [c] = await jobs.claim(conn, queue, 5000)
    await jobs.update_progress(conn, queue, job_id, "10")
    env = {**os.environ, "ECHOMQ_URL": redis_url}
    argv = [sys.executable, "-m", "echomq", "watch", queue, "--count", "3", "--duration", "20"]
    proc = await trio.lowlevel.open_process(argv, stdout=subprocess.PIPE, env=env)
    assert proc.stdout is not None
    seen = b""
    with trio.fail_after(20):
        while b"watching" not in seen:  # the subscription is confirmed before this line
            chunk = await proc.stdout.receive_some()
            assert chunk, seen
            seen += chunk
        await jobs.update_progress(conn, queue, job_id, "50")
        await jobs.update_progress(conn, queue, job_id, "90")
        await jobs.complete(conn, queue, job_id, c.token, b"r")
        while chunk := await proc.stdout.receive_some():
            seen += chunk
        assert await proc.wait() == 0
    lines = seen.decode().splitlines()
    assert lines[0] == f"watching {queue}: 1 active"
    assert lines[1] == f"active {job_id} progress=10"
    events = [line.split()[1:] for line in lines[2:]]
    assert events == [
        ["progress", job_id, "progress=50"],
        ["progress", job_id, "progress=90"],
        ["completed", job_id],
    ]


async def test_watch_stops_after_duration(
    redis_url: str, conn: echomq.Connection, queue: str
) -> None:
    """watch --duration exits 0 by itself when no event arrives."""
    await admin.ensure_schema(conn, queue)
    p = await run(redis_url, "watch", queue, "--duration", "0.3")
    assert p.returncode == 0 and out(p).startswith(f"watching {queue}: 0 active")


DEEP = b"[" * 40_000 + b"]" * 40_000  # 80 KB: more than `job` prints
GARBAGE = b"\xff\xfe\x80garbage"


async def test_job_explain_and_watch_show_undecodable_data_raw(
    redis_url: str, conn: echomq.Connection, queue: str
) -> None:
    """A payload, result or progress that is not UTF-8 (or nested too deeply to parse)
    is shown raw and marked; job, explain and watch exit 0 with no traceback."""
    deep = await jobs.enqueue(conn, queue, b'{"task":"t","args":[' + DEEP + b"]}")
    garbage = await jobs.enqueue(conn, queue, GARBAGE)
    claimed = {c.id: c for c in await jobs.claim(conn, queue, 30_000, count=2)}
    await jobs.complete(conn, queue, deep, claimed[deep].token, DEEP)
    await conn.execute("HSET", Keyspace(queue).job(garbage), "progress", GARBAGE)
    p = await run(redis_url, "job", garbage, "-q", queue)
    assert p.returncode == 0 and "Traceback" not in err(p), err(p)
    assert "not UTF-8, 10 bytes" in out(p) and "\\xff\\xfe\\x80garbage" in out(p)
    p = await run(redis_url, "job", deep, "-q", queue)
    assert p.returncode == 0 and "Traceback" not in err(p), err(p)
    assert '{"task":"t","args":[[[[' in out(p) and "[truncated" in out(p)
    for job_id in (deep, garbage):
        p = await run(redis_url, "explain", job_id, "-q", queue)
        assert p.returncode == 0 and "Traceback" not in err(p), err(p)
    p = await run(redis_url, "watch", queue, "--duration", "0.3")
    assert p.returncode == 0 and "Traceback" not in err(p), err(p)
    assert f"active {garbage} progress=\\xff\\xfe\\x80garbage" in out(p)


# -- lanes: limits, groups (docs/lanes.md) ----------------------------------------------------


async def test_limits_show_and_change_at_run_time(
    redis_url: str, conn: echomq.Connection, queue: str
) -> None:
    await admin.ensure_schema(conn, queue)
    p = await run(redis_url, "limits", queue, "--rate", "100/s")
    assert p.returncode == 0, err(p)
    assert "queue rate               100 per 1.0 s" in out(p)
    p = await run(
        redis_url, "limits", queue, "--every-group", "--concurrency", "2", "--rate", "5/m"
    )
    assert p.returncode == 0, err(p)
    limits = await admin.limits(conn, queue)
    assert limits.group_concurrency == 2
    assert limits.group_rate == admin.RateLimit(max_jobs=5, period_ms=60_000)
    p = await run(redis_url, "limits", queue, "--group", "acme", "--concurrency", "1", "--json")
    assert p.returncode == 0, err(p)
    shown = json.loads(out(p))
    assert (shown["group"], shown["limit"], shown["own_limit"]) == ("acme", 1, True)
    p = await run(redis_url, "limits", queue, "--rate", "none", "--json")
    assert json.loads(out(p))["rate"] is None


async def test_limits_set_and_clear_the_queues_concurrency(
    redis_url: str, conn: echomq.Connection, queue: str
) -> None:
    await admin.ensure_schema(conn, queue)
    p = await run(redis_url, "limits", queue, "--concurrency", "5")
    assert p.returncode == 0, err(p)
    assert "queue concurrency        5" in out(p)
    assert (await admin.limits(conn, queue)).concurrency == 5
    p = await run(redis_url, "limits", queue, "--concurrency", "0", "--json")
    assert p.returncode == 0, err(p)
    assert json.loads(out(p))["concurrency"] is None
    await admin.set_group_concurrency(conn, queue, 2, group="g")
    p = await run(redis_url, "limits", queue, "--group", "g", "--concurrency", "0", "--json")
    assert p.returncode == 0 and json.loads(out(p))["limit"] is None, err(p)
    p = await run(redis_url, "limits", queue, "--rate", "100/s", "--rate-kind", "sliding")
    assert p.returncode == 0, err(p)
    assert "queue rate               100 per 1.0 s (sliding)" in out(p)
    rate = (await admin.limits(conn, queue)).rate
    assert rate is not None and rate.kind == "sliding"


@pytest.mark.parametrize(
    "argv",
    [
        ["--concurrency", "-1", "--group", "g"],
        ["--concurrency", "-1"],
        ["--rate-kind", "sliding"],
        ["--rate", "5/s", "--rate-kind", "gcra"],
        ["--rate", "0/s"],
        ["--rate", "ten/s"],
        ["--group", "a b", "--concurrency", "1"],
    ],
)
async def test_bad_limits_exit_2(redis_url: str, queue: str, argv: list[str]) -> None:
    p = await run(redis_url, "limits", queue, *argv)
    assert p.returncode == 2, (out(p), err(p))


async def test_groups_and_status_show_the_lanes(
    redis_url: str, conn: echomq.Connection, queue: str
) -> None:
    await admin.ensure_schema(conn, queue)  # the queue exists first
    await admin.set_group_concurrency(conn, queue, 1, group="acme")
    for group in ("acme", "acme", "bob"):
        await jobs.enqueue(conn, queue, b"", group=group)
    await jobs.claim(conn, queue, 10_000, count=5)
    await jobs.enqueue(conn, queue, b"", group="acme")
    p = await run(redis_url, "groups", queue)
    assert p.returncode == 0, err(p)
    assert "acme" in out(p) and "at its limit" in out(p)
    p = await run(redis_url, "groups", queue, "--json")
    rows = {r["group"]: r for r in json.loads(out(p))}
    assert (rows["acme"]["waiting"], rows["acme"]["active"]) == (2, 1)
    assert (rows["bob"]["waiting"], rows["bob"]["active"]) == (0, 1)
    p = await run(redis_url, "status", queue, "--json")
    (row,) = json.loads(out(p))
    assert (row["pending"], row["grouped"], row["groups"]) == (2, 2, 2)
