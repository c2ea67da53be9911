"""`echomq repeat list|add|remove|pause|resume`, status's repeat counts and explain of a run."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import trio

import echomq
from echomq import repeat


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


@pytest.mark.both_backends
async def test_add_list_pause_resume_remove(
    redis_url: str, conn: echomq.Connection, queue: str
) -> None:
    p = await run(
        redis_url, "repeat", "add", queue, "nightly", "app.report", '["eu"]',
        "--cron", "30 2 * * *", "--tz", "Europe/Berlin", "--missed", "skip", "--create",
    )  # fmt: skip
    assert p.returncode == 0, err(p)
    assert "added nightly" in out(p) and "next run at" in out(p)
    info = await repeat.get(conn, queue, "nightly")
    assert info.schedule == repeat.Schedule(cron="30 2 * * *", tz="Europe/Berlin")
    assert json.loads(info.payload) == {"task": "app.report", "args": ["eu"], "kwargs": {}}
    assert info.missed == "skip"

    p = await run(redis_url, "repeat", "add", queue, "tick", "app.tick", "--every", "90s")
    assert p.returncode == 0, err(p)
    assert (await repeat.get(conn, queue, "tick")).schedule.every_ms == 90_000

    p = await run(redis_url, "repeat", "list", queue)
    assert p.returncode == 0, err(p)
    assert "nightly" in out(p) and "every 1m30s" in out(p) and "Europe/Berlin" in out(p)
    p = await run(redis_url, "repeat", "list", queue, "--json", "--upcoming", "2")
    listing = json.loads(out(p))
    assert [r["key"] for r in listing["repeats"]] == ["tick", "nightly"]
    assert all(len(r["upcoming_ms"]) == 2 for r in listing["repeats"])

    p = await run(redis_url, "repeat", "pause", queue, "tick")
    assert p.returncode == 0 and "paused" in out(p)
    assert (await repeat.get(conn, queue, "tick")).paused
    p = await run(redis_url, "status", queue, "--json")
    [row] = json.loads(out(p))
    assert (row["repeats"], row["repeats_paused"]) == (2, 1)
    p = await run(redis_url, "repeat", "resume", queue, "tick")
    assert p.returncode == 0 and "next run at" in out(p)
    assert not (await repeat.get(conn, queue, "tick")).paused

    p = await run(redis_url, "repeat", "remove", queue, "tick")
    assert p.returncode == 0
    p = await run(redis_url, "repeat", "remove", queue, "tick")
    assert p.returncode == 1 and "no repeatable 'tick'" in err(p)


async def test_add_with_codec_msgpack_stores_a_msgpack_call(
    redis_url: str, conn: echomq.Connection, queue: str
) -> None:
    from echomq._model.codec import codec_named

    p = await run(
        redis_url, "repeat", "add", queue, "tick", "app.tick", '["eu"]',
        "--every", "1m", "--codec", "msgpack", "--create",
    )  # fmt: skip
    assert p.returncode == 0, err(p)
    call = codec_named("msgpack").decode_call((await repeat.get(conn, queue, "tick")).payload)
    assert (call.task, call.args) == ("app.tick", ("eu",))


async def test_bad_input_exits_2_and_writes_nothing(
    redis_url: str, conn: echomq.Connection, queue: str
) -> None:
    for args in (
        ["--cron", "61 * * * *"],
        ["--cron", "* * * * *", "--tz", "Mars/Base"],
        ["--every", "0"],
        ["--every", "soon"],
        [],
        ["--every", "5s", "--cron", "* * * * *"],
    ):
        p = await run(redis_url, "repeat", "add", queue, "k", "app.t", *args)
        assert p.returncode == 2, (args, err(p))
    p = await run(redis_url, "repeat", "add", queue, "bad key", "app.t", "--every", "5")
    assert p.returncode == 2
    assert (await repeat.list_repeats(conn, queue)).total == 0


async def test_explain_of_a_run_shows_its_upcoming_runs(
    redis_url: str, conn: echomq.Connection, queue: str
) -> None:
    added = await repeat.add(
        conn, queue, "k", task="app.t", payload=b"{}", schedule=repeat.Schedule.of(every=0.05)
    )
    async with echomq.connect(redis_url) as c:
        while not (tick := await repeat.tick(c, queue)).fired:
            assert tick.now_ms < added.next_ms + 5000
    p = await run(redis_url, "explain", tick.fired[0], "-q", queue)
    assert p.returncode == 0, err(p)
    assert "run of 'k'" in out(p) and "every 50ms" in out(p) and "upcoming runs" in out(p)
