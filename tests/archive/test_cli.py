"""``echomq history`` and ``echomq archive`` as a user runs them (subprocesses): output,
paging, filters and exit codes (0 done, 1 refused, 2 usage)."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import attrs
import pytest
import trio

from echomq._model.completion import FinishedJob, FinishState
from echomq.archive.store import now_ms, open_store


async def run(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[bytes]:
    with trio.fail_after(30):
        return await trio.run_process(
            [sys.executable, "-m", "echomq", *args],
            capture_stdout=True,
            capture_stderr=True,
            check=False,
            env={**os.environ, **(env or {})},
        )


def fill(store_url: str, queue: str) -> None:
    """Five completed (t.a), two dead (t.b) and one cancelled job, one second apart."""
    now = now_ms()
    base = FinishedJob(
        queue=queue, id="x", token=1, state=FinishState.COMPLETED, finished_at=0,
        stream_id="0-0", task="t.a", result=b'"fine"', created_at=1, claimed_at=now - 60_000,
    )  # fmt: skip
    jobs = [attrs.evolve(base, id=f"ok{i}", finished_at=now - 50_000 + i * 1000) for i in range(5)]
    jobs += [
        attrs.evolve(base, id=f"dead{i}", state=FinishState.DEAD, task="t.b", result=None,
                     error=f"boom {i}", token=3, finished_at=now - 40_000 + i * 1000)
        for i in range(2)
    ]  # fmt: skip
    jobs.append(
        attrs.evolve(base, id="stop", state=FinishState.CANCELLED, result=None,
                     reason="user asked", finished_at=now - 7_200_000)  # two hours ago
    )  # fmt: skip
    store = open_store(store_url)
    store.write(jobs)
    store.close()


async def test_history_prints_a_table_newest_first_and_pages(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'a.db'}"
    fill(url, "mail")
    first = await run("history", "mail", "--to", url, "--limit", "3")
    assert first.returncode == 0, first.stderr
    text = first.stdout.decode()
    assert "history of mail" in text
    assert text.index("dead1") < text.index("dead0") < text.index("ok4")
    assert "boom 1" in text and "ok3" not in text
    cursor = text.rsplit("more: --before ", 1)[1].split()[0]
    second = await run("history", "mail", "--to", url, "--limit", "3", "--before", cursor)
    assert second.returncode == 0
    assert "ok3" in second.stdout.decode() and "dead1" not in second.stdout.decode()


async def test_history_json_and_filters(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'a.db'}"
    fill(url, "mail")
    dead = await run("history", "mail", "--to", url, "--state", "dead", "--json")
    assert dead.returncode == 0, dead.stderr
    data = json.loads(dead.stdout)
    assert [j["id"] for j in data["jobs"]] == ["dead1", "dead0"] and data["next"] is None
    assert data["jobs"][0] | {"archived_at": 0, "finished_at": 0, "claimed_at": 0} == {
        "queue": "mail", "id": "dead1", "task": "t.b", "state": "dead", "token": 3,
        "failures": None, "result": None, "error": "boom 1", "reason": None, "created_at": 1,
        "claimed_at": 0, "finished_at": 0, "archived_at": 0, "stream_id": "0-0", "extra": {},
    }  # fmt: skip
    recent = json.loads(
        (await run("history", "mail", "--to", url, "--since", "1h", "--json")).stdout
    )
    assert "stop" not in [j["id"] for j in recent["jobs"]] and len(recent["jobs"]) == 7
    by_task = json.loads(
        (await run("history", "mail", "--to", url, "--task", "t.a", "--json")).stdout
    )
    assert sorted(j["id"] for j in by_task["jobs"]) == ["ok0", "ok1", "ok2", "ok3", "ok4", "stop"]
    old = await run("history", "mail", "--to", url, "--until", "1h", "--state", "cancelled")
    assert "user asked" in old.stdout.decode()
    env = {"ECHOMQ_ARCHIVE_URL": url}  # the default store
    assert "ok4" in (await run("history", "mail", "--job", "ok4", env=env)).stdout.decode()
    none = await run("history", "other", "--to", url)
    assert none.returncode == 0 and "no finished jobs of other" in none.stdout.decode()


@pytest.mark.parametrize(
    ("args", "code", "message"),
    [
        (["history", "q", "--since", "yesterday"], 2, "not a duration"),
        (["history", "bad name"], 2, "invalid queue name"),
        (["history", "q", "--to", "mysql://x/y"], 2, "unsupported archive store"),
        (["history", "q", "--limit", "0"], 2, "must be in 1..1000"),
        (["history", "q", "--before", "x"], 2, "not a history cursor"),
        (["history", "q"], 1, "no archive at"),
        (
            ["history", "q", "--to", "postgresql://127.0.0.1:1/db?connect_timeout=1"],
            1,
            "cannot be reached",
        ),
        (["archive"], 2, "--queue"),
        (["archive", "--queue", "q", "--to", "mysql://x/y"], 2, "unsupported archive store"),
        (["archive", "--queue", "q", "--batch", "0"], 2, "must be > 0"),
    ],
)
async def test_bad_input_and_refusals_exit_with_their_code(
    tmp_path: Path, args: list[str], code: int, message: str
) -> None:
    """Usage errors exit 2, refusals 1, each with the reason on stderr and no traceback."""
    env = {"ECHOMQ_ARCHIVE_URL": f"sqlite:///{tmp_path / 'none.db'}"}
    proc = await run(*args, env=env)
    assert proc.returncode == code, (proc.stdout, proc.stderr)
    assert message in proc.stderr.decode()
    assert "Traceback" not in proc.stderr.decode()


async def test_archive_refuses_a_store_of_a_newer_echomq(redis_url: str, tmp_path: Path) -> None:
    path = tmp_path / "a.db"
    open_store(str(path)).close()
    with sqlite3.connect(path) as db:
        db.execute("UPDATE emq_archive_meta SET value = '7' WHERE name = 'schema_version'")
    proc = await run("archive", "--url", redis_url, "--queue", "q", "--to", f"sqlite:///{path}")
    assert proc.returncode == 1
    assert "schema version 7" in proc.stderr.decode() and "Traceback" not in proc.stderr.decode()
