"""The operator's commands on a terminal 80 columns wide (a pseudo-terminal with that window
size, as a person's shell): nothing is cut (no "…", every header whole, no line wider
than the terminal), and the figures are the ones Redis holds."""

from __future__ import annotations

import re
from pathlib import Path

from _terminal import Terminal, in_terminal

import echomq
from echomq import admin, jobs
from echomq._model.completion import FinishedJob, FinishState
from echomq.admin import workers
from echomq.archive.store import now_ms, open_store

COLUMNS = 80
STATUS_HEADERS = ("queue", "state", "pending", "active", "scheduled", "dead", "done/min")
WIDE_HEADERS = (
    "waiting", "completed", "done (total)", "dead (total)", "dead/min", "done/min (5m)",
    "repeat", "groups",
)  # fmt: skip
ERROR = "ValueError: the address 'nobody@example' has no domain part"


def assert_uncut(t: Terminal, headers: tuple[str, ...] = (), *, width: int = COLUMNS) -> None:
    """Nothing cut: no ellipsis, no line wider than ``width``, the headers on one line."""
    assert t.code == 0, (t.screen, t.stderr)
    assert "…" not in t.screen, t.screen
    assert "Traceback" not in t.stderr, t.stderr
    for line in t.lines:
        assert len(line.rstrip()) <= width, (len(line.rstrip()), line)
    if headers:
        header_lines = [line for line in t.lines if all(h in line for h in headers)]
        assert header_lines, (headers, t.screen)


def column(t: Terminal, header: str, next_header: str) -> str:
    """The text of a left-aligned column, from its header's offset to the next one's, its
    lines joined: what a folded cell reads as whole."""
    line_no, line = next(
        (i, ln) for i, ln in enumerate(t.lines) if header in ln and next_header in ln
    )
    start, end = line.index(header), line.index(next_header)
    return "".join(ln[start:end].strip() for ln in t.lines[line_no + 1 :])


def row_of(t: Terminal, first: str) -> list[str]:
    """The cells of the line that starts with ``first`` (split on runs of spaces)."""
    for line in t.lines:
        cells = re.split(r"\s{2,}", line.strip())
        if cells and cells[0] == first:
            return cells
    raise AssertionError(f"no line starts with {first!r}:\n{t.screen}")


async def _dead(
    conn: echomq.Connection, queue: str, n: int, *, task: str = "app.send"
) -> list[str]:
    """``n`` dead jobs of ``task`` (enqueued, claimed by a worker with a record, failed)."""
    ids = await jobs.enqueue_many(
        conn, queue, [jobs.NewJob(payload=b"{}", task=task) for _ in range(n)]
    )
    batch = await jobs.claim_batch(conn, queue, 60_000, count=n, worker="w-1")
    for c in batch.jobs:
        await jobs.fail(conn, queue, c.id, c.token, ERROR, dead=True)
    return ids


async def _busy_queue(conn: echomq.Connection, queue: str) -> None:
    """Pending, active, scheduled, dead and completed jobs, and a worker record."""
    await jobs.enqueue_many(
        conn, queue, [jobs.NewJob(payload=b"{}", task="app.t") for _ in range(12)]
    )
    await jobs.enqueue(conn, queue, b"{}", delay_ms=60_000)
    claimed = await jobs.claim(conn, queue, 60_000, count=4)
    await jobs.complete(conn, queue, claimed[0].id, claimed[0].token, b"ok")
    await jobs.fail(conn, queue, claimed[1].id, claimed[1].token, ERROR, dead=True)


async def test_status_fits_80_columns_with_its_figures(
    redis_url: str, conn: echomq.Connection, queue: str
) -> None:
    """The table of every queue: the seven columns whole, the figures right; a queue
    name longer than the room folds (never "…")."""
    long_name = queue + "-" + "reports-of-the-finance-team-for-the-last-quarter" * 2
    await _busy_queue(conn, queue)
    await admin.ensure_schema(conn, long_name)
    t = await in_terminal(redis_url, "status", columns=COLUMNS)
    assert_uncut(t, STATUS_HEADERS)
    assert row_of(t, queue) == [queue, "running", "8", "2", "1", "1", "1"]
    assert long_name not in t.screen  # folded over lines, each piece whole
    assert long_name in column(t, "queue", "state")


async def test_status_wide_prints_every_column_uncut(
    redis_url: str, conn: echomq.Connection, queue: str
) -> None:
    """--wide: every column at its full width (the terminal wraps the lines; nothing is
    cut, so a pager with -S shows the table whole)."""
    await _busy_queue(conn, queue)
    t = await in_terminal(redis_url, "status", "--wide", columns=COLUMNS)
    assert t.code == 0 and "…" not in t.screen, t.screen
    header = next(line for line in t.lines if "queue" in line and "groups" in line)
    for name in STATUS_HEADERS + WIDE_HEADERS:
        assert name in header, (name, header)


async def test_status_of_one_queue_is_every_figure_one_per_line(
    redis_url: str, conn: echomq.Connection, queue: str
) -> None:
    await _busy_queue(conn, queue)
    await admin.pause(conn, queue)
    t = await in_terminal(redis_url, "status", queue, columns=COLUMNS)
    assert_uncut(t)
    figures = {line[:18].strip(): line[18:].strip() for line in t.lines if line.strip()}
    assert figures["queue"] == queue and figures["state"] == "paused"
    assert figures["pending"] == "8" and figures["active"] == "2"
    assert figures["scheduled"] == "1" and figures["dead"] == "1"
    assert figures["completed"].startswith("1 ") and figures["dead (total)"] == "1"
    assert figures["done/min"].startswith("1 ")
    for label in ("waiting", "done (total)", "cancelled (total)", "dead/min",
                  "done/min avg", "repeatables", "groups"):  # fmt: skip
        assert label in figures, (label, t.screen)


async def test_jobs_lists_ids_within_80_columns(
    redis_url: str, conn: echomq.Connection, queue: str
) -> None:
    """jobs --state dead: every id whole on its line, its task, when it died, the error."""
    ids = await _dead(conn, queue, 3, task="app.a.rather.long.module.path.to.send_welcome_mail")
    t = await in_terminal(redis_url, "jobs", queue, "--state", "dead", columns=COLUMNS)
    assert_uncut(t, ("id", "died", "task, error"))
    for job_id in ids:
        assert row_of(t, job_id)[1].endswith("ago")
    assert "ValueError: the address" in t.screen
    t = await in_terminal(redis_url, "jobs", queue, "--state", "pending", columns=COLUMNS)
    assert_uncut(t)
    assert f"no pending jobs in {queue}" in t.screen


async def test_explain_of_a_dead_job_says_it_finished_not_that_it_runs(
    redis_url: str, conn: echomq.Connection, queue: str
) -> None:
    """The worker that ran it is alive: explain names it as the last to claim the job,
    says when and how the job finished, and never that anyone is running it."""
    [job_id] = await _dead(conn, queue, 1)
    beat = workers.WorkerBeat(
        host="box", pid=7, version="0.2.0", queues=(queue,), concurrency=4, lease_ms=300,
        beat_ms=100, held=0,
    )  # fmt: skip
    await workers.beat(conn, queue, "w-1", beat, ttl_ms=60_000, up_ms=1)
    t = await in_terminal(redis_url, "explain", job_id, "-q", queue, columns=COLUMNS)
    assert_uncut(t)
    assert "running it" not in t.screen and "holder" not in t.screen, t.screen
    assert f"{job_id}: dead " in t.screen and " ago after 1 failure(s)" in t.screen
    assert re.search(r"finished +\d{4}-\d\d-\d\d [\d:.]+Z \([\d.]+ (ms|s) ago\): dead", t.screen)
    assert re.search(r"last claimed by +worker w-1 \(box, pid 7\)", t.screen), t.screen


async def test_explain_of_a_completed_job_says_when_it_finished(
    redis_url: str, conn: echomq.Connection, queue: str
) -> None:
    job_id = await jobs.enqueue(conn, queue, b"{}")
    batch = await jobs.claim_batch(conn, queue, 60_000, worker="w-2")
    await jobs.complete(conn, queue, job_id, batch.jobs[0].token, b"ok")
    t = await in_terminal(redis_url, "explain", job_id, "-q", queue, columns=COLUMNS)
    assert_uncut(t)
    assert "running it" not in t.screen
    assert re.search(r"finished +\d{4}-\d\d-\d\d [\d:.]+Z \(.* ago\): completed", t.screen)


async def test_reprocess_all_dead_on_a_terminal_ends_with_its_count(
    redis_url: str, conn: echomq.Connection, queue: str
) -> None:
    await _dead(conn, queue, 7)
    t = await in_terminal(
        redis_url, "reprocess", queue, "--all-dead", "--batch", "3", columns=COLUMNS
    )
    assert_uncut(t)
    assert t.lines[-1].strip() == f"reprocessed 7 dead jobs of {queue} (of 7 dead): back in pending"
    stats = await admin.stats(conn, queue)
    assert (stats.dead, stats.pending) == (0, 7)


async def test_a_refusal_is_one_line_on_a_terminal_too(redis_url: str, queue: str) -> None:
    """stderr on the terminal: the reason is one logical line, never wrapped by rich."""
    t = await in_terminal(redis_url, "pause", queue + "-typo", columns=COLUMNS, stderr_tty=True)
    assert t.code == 1
    [line] = t.screen.strip().splitlines()
    assert line.startswith(f"echomq pause: no queue '{queue}-typo' at redis://")


async def test_version(redis_url: str) -> None:
    for args in (["--version"], ["version"]):
        t = await in_terminal(redis_url, *args, columns=COLUMNS)
        assert (t.code, t.screen.strip()) == (0, f"echomq {echomq.__version__}")


async def test_workers_and_groups_fit_80_columns(
    redis_url: str, conn: echomq.Connection, queue: str
) -> None:
    """A long worker id, a blocked task and a long group name fold; the numbers stay whole."""
    await admin.ensure_schema(conn, queue)  # as the worker does at its start
    beat = workers.WorkerBeat(
        host="build-server-01.internal.example.com", pid=12345, version="0.2.0",
        queues=(queue,), concurrency=64, lease_ms=30_000, beat_ms=1000, held=3,
        blocked_task="app.images.resize_image_in_the_background",
    )  # fmt: skip
    await workers.beat(conn, queue, "build-server-01-12345-abcdef", beat, ttl_ms=60_000,
                       up_ms=1, blocked_ms=2300)  # fmt: skip
    t = await in_terminal(redis_url, "workers", queue, columns=COLUMNS)
    assert_uncut(t, ("worker", "status", "held", "done", "failed", "last beat"))
    assert "3/64" in t.screen and "blocked" in t.screen
    t = await in_terminal(redis_url, "workers", queue, "--wide", columns=COLUMNS)
    assert t.code == 0 and "…" not in t.screen
    assert "12345" in t.screen and "build-server-01.internal.example.com" in t.screen
    group = "acme-corporation-international-holdings"
    await admin.set_group_concurrency(conn, queue, 1, group=group)
    await jobs.enqueue(conn, queue, b"{}", group=group)
    t = await in_terminal(redis_url, "groups", queue, columns=COLUMNS)
    assert_uncut(t, ("group", "waiting", "active", "limit", "rate", "now"))
    assert group in column(t, "group", "waiting") and "has a turn" in t.screen


async def test_history_fits_80_columns(redis_url: str, tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'a.db'}"
    job = FinishedJob(
        queue="mail", id="3f0c9b1e0a8d4c55a1f1b0c0f6a3d2e1", token=1,
        state=FinishState.DEAD, finished_at=now_ms(), stream_id="1-0",
        task="app.a.rather.long.module.path.to.send_welcome_mail", error=ERROR,
        created_at=1, claimed_at=now_ms() - 1500,
    )  # fmt: skip
    store = open_store(url)
    store.write([job])
    store.close()
    t = await in_terminal(redis_url, "history", "mail", "--to", url, columns=COLUMNS)
    assert_uncut(t, ("finished", "job", "task", "state", "token", "ran"))
    assert job.id in column(t, "job", "task") and job.task in column(t, "task", "state")
    assert "ValueError:" in t.screen and "domain" in t.screen
