"""The page in a real headless Chromium (Debian's /usr/bin/chromium, driven by playwright).

Playwright's sync API runs in a worker thread (``trio.to_thread``); the thread calls back
into Trio (``trio.from_thread.run``) to move jobs while the page watches. Screenshots are
kept under tests/artifacts/ (git-ignored).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import pytest
import trio

import echomq
from echomq import admin, jobs
from echomq.dashboard import DashboardInfo

from .conftest import payload

CHROMIUM = Path("/usr/bin/chromium")
ARTIFACTS = Path(__file__).resolve().parents[1] / "artifacts"
ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]

pytestmark = pytest.mark.skipif(
    not CHROMIUM.exists(),
    reason="Debian's chromium is not installed at /usr/bin/chromium (the test command installs it)",
)

T = TypeVar("T")


async def in_browser(url: str, shot: str, steps: Callable[[Any], T]) -> T:
    """Open ``url`` in a fresh headless Chromium, run ``steps(page)``, keep a screenshot."""
    from playwright.sync_api import sync_playwright

    def run() -> T:
        errors: list[str] = []
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=str(CHROMIUM), args=ARGS)
            try:
                page = browser.new_page(viewport={"width": 1300, "height": 1000})
                page.set_default_timeout(8000)
                page.on("pageerror", lambda exc: errors.append(str(exc)))
                page.goto(url)
                try:
                    return steps(page)
                finally:
                    ARTIFACTS.mkdir(exist_ok=True)
                    page.screenshot(path=str(ARTIFACTS / f"dashboard-{shot}.png"), full_page=True)
                    assert errors == [], f"errors in the page: {errors}"
            finally:
                browser.close()

    with trio.fail_after(60):
        return await trio.to_thread.run_sync(run)


def count_is(page: Any, state: str, value: int) -> None:
    page.wait_for_function(
        "([s, v]) => document.querySelector(`[data-count=${s}]`)?.textContent === String(v)",
        arg=[state, value],
    )


async def test_page_counts_change_while_jobs_run(
    dashboard: DashboardInfo, conn: echomq.Connection, queue: str
) -> None:
    """The count tiles follow claims and completions; without the token buttons are disabled."""
    for i in range(5):
        await jobs.enqueue(conn, queue, payload("demo.square", i))

    async def run_three() -> None:
        claimed = await jobs.claim(conn, queue, 30_000, count=3)
        await jobs.update_progress(conn, queue, claimed[0].id, 60)
        for job in claimed[1:]:
            await jobs.complete(conn, queue, job.id, job.token, b"1")

    def steps(page: Any) -> dict[str, Any]:
        count_is(page, "pending", 5)
        read_only = page.locator("#q-pause").is_disabled()
        trio.from_thread.run(run_three)
        count_is(page, "pending", 2)
        count_is(page, "active", 1)
        count_is(page, "completed", 2)
        page.wait_for_selector("#active-body tr [role=progressbar][aria-valuenow='60']")
        return {"read_only": read_only, "state": page.locator("#auth-state").text_content()}

    seen = await in_browser(dashboard.url, "counts", steps)
    assert seen == {"read_only": True, "state": "read-only"}


async def test_pause_button_pauses_the_queue_in_redis(
    dashboard: DashboardInfo, conn: echomq.Connection, queue: str
) -> None:
    """With the token from the URL fragment, Pause sets the gate; the page shows it paused."""
    await jobs.enqueue(conn, queue, payload())

    def steps(page: Any) -> str:
        page.wait_for_selector("#auth-state[data-ok=true]")
        page.click("#q-pause")
        page.wait_for_selector("#q-paused:not([hidden])")
        page.wait_for_selector("#q-resume:not([hidden])")
        return str(page.evaluate("location.href"))

    href = await in_browser(dashboard.login_url, "paused", steps)
    assert await admin.is_paused(conn, queue) is True
    assert dashboard.token not in href  # the page drops the token from its address


async def test_reprocess_button_moves_a_dead_job_to_pending(
    dashboard: DashboardInfo, conn: echomq.Connection, queue: str
) -> None:
    """Reprocess on a dead job's row sends it back to pending; the row leaves the dead table."""
    job_id = await jobs.enqueue(conn, queue, payload("demo.flaky", "x"), max_attempts=1)
    [claimed] = await jobs.claim(conn, queue, 30_000)
    await jobs.add_log(conn, queue, job_id, "tried once")
    await jobs.fail(conn, queue, job_id, claimed.token, "RuntimeError: flaky")
    row = f"#dead-body tr[data-job='{job_id}']"

    def steps(page: Any) -> str | None:
        page.wait_for_selector("#auth-state[data-ok=true]")
        page.wait_for_selector(f"{row} button[data-action=reprocess]:not([disabled])")
        error = page.locator(f"{row} .err").text_content()
        page.click(f"{row} button[data-action=reprocess]")
        page.wait_for_selector(row, state="detached")
        count_is(page, "pending", 1)
        return error

    error = await in_browser(dashboard.login_url, "reprocess", steps)
    assert error == "RuntimeError: flaky"
    info = await jobs.get_job(conn, queue, job_id)
    assert info is not None and info.state is echomq.JobState.PENDING


async def test_wrong_token_leaves_the_page_read_only(
    dashboard: DashboardInfo, conn: echomq.Connection, queue: str
) -> None:
    """A wrong token typed into the form is refused; the buttons stay disabled."""
    await jobs.enqueue(conn, queue, json.dumps({"task": "t", "args": [], "kwargs": {}}))

    def steps(page: Any) -> bool:
        count_is(page, "pending", 1)
        page.fill("#token", "not-the-token")
        page.click("#auth button")
        page.wait_for_selector(".toast.bad")
        return bool(page.locator("#q-pause").is_disabled())

    assert await in_browser(dashboard.url, "wrong-token", steps) is True
    assert await admin.is_paused(conn, queue) is False


async def _archived_jobs(conn: echomq.Connection, queue: str, store: str) -> list[str]:
    """30 jobs finished by the scripts (every fifth dead), folded into an SQLite archive by
    the recording consumer; answers their ids in finishing order."""
    from _waits import until
    from echomq.archive import ArchiveConfig, history, serve_archive

    ids = await jobs.enqueue_many(
        conn, queue, [jobs.NewJob(payload=payload("demo.square", i), task="demo.square")
                      for i in range(30)]
    )  # fmt: skip
    for i, job_id in enumerate(ids):
        [held] = await jobs.claim(conn, queue, 30_000)
        assert held.id == job_id
        if i % 5 == 4:
            await jobs.fail(conn, queue, job_id, held.token, f"ValueError: {i}", dead=True)
        else:
            await jobs.complete(conn, queue, job_id, held.token, str(i * i))

    async def archived() -> bool:
        return len((await history(store, queue, limit=100)).jobs) == 30

    async with trio.open_nursery() as nursery:
        await nursery.start(
            lambda task_status: serve_archive(
                conn.config, [queue], store, config=ArchiveConfig(block=0.1),
                task_status=task_status,
            )
        )  # fmt: skip
        await until(archived, within=20)
        nursery.cancel_scope.cancel()
    return ids


async def test_history_panel_pages_the_archive_newest_first(
    nursery: trio.Nursery, conn: echomq.Connection, queue: str, tmp_path: Path
) -> None:
    """Given --archive, the page shows the queue's archived runs newest first, 25 a page;
    Older pages on, the outcome filter narrows it."""
    from echomq.dashboard import serve_dashboard

    store = f"sqlite:///{tmp_path / 'archive.db'}"
    ids = await _archived_jobs(conn, queue, store)
    info: DashboardInfo = await nursery.start(
        lambda task_status: serve_dashboard(
            conn, queues=[queue], interval=0.1, archive=store, task_status=task_status
        )
    )

    def rows(page: Any) -> list[tuple[str, str]]:
        return [
            (str(r.get_attribute("data-job")), str(r.get_attribute("data-state")))
            for r in page.locator("#history-body tr").all()
        ]

    def steps(page: Any) -> dict[str, Any]:
        page.wait_for_selector("#history-panel:not([hidden])")
        page.wait_for_function("() => document.querySelectorAll('#history-body tr').length === 25")
        first = rows(page)
        text = page.locator(f"#history-body tr[data-job='{ids[-2]}'] td:last-child").text_content()
        page.click("#history-older")
        page.wait_for_function("() => document.querySelectorAll('#history-body tr').length === 5")
        second = rows(page)
        page.select_option("#history-state", "dead")
        page.wait_for_function(
            "() => { const rows = [...document.querySelectorAll('#history-body tr')];"
            " return rows.length === 6 && rows.every(r => r.dataset.state === 'dead'); }"
        )
        dead = rows(page)
        return {"first": first, "second": second, "dead": dead, "text": text}

    seen = await in_browser(info.url, "history", steps)
    newest_first = list(reversed(ids))
    assert [job for job, _ in seen["first"]] == newest_first[:25]
    assert [job for job, _ in seen["second"]] == newest_first[25:]
    assert [job for job, _ in seen["dead"]] == [j for i, j in enumerate(ids) if i % 5 == 4][::-1]
    assert seen["text"] == "784"  # 28 * 28, the result as text


async def test_workers_panel_shows_running_blocked_and_gone_workers(
    dashboard: DashboardInfo, conn: echomq.Connection, redis_url: str, queue: str
) -> None:
    """The Workers panel lists a live echomq.Worker (running), a worker whose record says its
    event loop is blocked (in which task), and one whose record expired (gone)."""
    from echomq.admin import workers

    q = echomq.Queue(queue, url=redis_url)

    @q.task(lease=0.3)
    async def noop() -> None:
        return None

    def beat() -> workers.WorkerBeat:
        return workers.WorkerBeat(
            host="box", pid=7, version="0.1.0", queues=(queue,), concurrency=4, lease_ms=300,
            beat_ms=100, held=1, running=("j1",), blocked_task="app.resize_image",
            blocked_job="j1",
        )  # fmt: skip

    await workers.beat(conn, queue, "w-blocked", beat(), ttl_ms=60_000, up_ms=9000, blocked_ms=2300)
    await workers.beat(conn, queue, "w-gone", beat(), ttl_ms=1, up_ms=9000)
    worker = echomq.Worker(q, concurrency=2)

    def steps(page: Any) -> dict[str, str]:
        for name in ("w-blocked", "w-gone", worker.id):
            page.wait_for_selector(f"#workers-body tr[data-worker='{name}']")
        cell = "#workers-body tr[data-worker='{}'] td.status"
        return {
            name: str(page.locator(cell.format(name)).text_content())
            for name in ("w-blocked", "w-gone", worker.id)
        }

    async with trio.open_nursery() as nursery:
        await nursery.start(worker.serve)
        seen = await in_browser(dashboard.url, "workers", steps)
        worker.shutdown()
    assert seen[worker.id] == "running"
    assert seen["w-blocked"].startswith("blocked ") and seen["w-blocked"].endswith(
        " s in app.resize_image"
    )
    assert seen["w-gone"].startswith("gone (no heartbeat for ")


async def test_flow_panel_shows_a_flows_tree_with_states(
    dashboard: DashboardInfo, conn: echomq.Connection, queue: str
) -> None:
    """A 3-level flow: its waiting root is listed; the tree shows every node with its
    state and the parents' open counts, and follows a child's completion."""
    from echomq import flows

    def node(job_id: str, *children: flows.FlowJob) -> flows.FlowJob:
        job = jobs.NewJob(payload=payload("demo.square", job_id).encode(), job_id=job_id)
        return flows.FlowJob(job=job, queue=queue, children=children)

    tree = node("root", node("mid", node("leaf1"), node("leaf2")), node("leaf3"))
    await flows.add_flow(conn, [tree])

    async def complete_leaf1() -> None:
        [held] = await jobs.claim(conn, queue, 30_000)
        assert held.id == "leaf1"
        await jobs.complete(conn, queue, held.id, held.token, b"1")

    def state_is(page: Any, job: str, state: str) -> None:
        page.wait_for_selector(f"#flow-tree li[data-job='{job}'][data-state='{state}']")

    def steps(page: Any) -> dict[str, Any]:
        page.wait_for_selector("#flow-waiting button[data-job='root']")
        waiting = page.locator("#flow-waiting button").count()
        page.click("#flow-waiting button[data-job='root']")
        for job, state in [("root", "waiting"), ("mid", "waiting"), ("leaf1", "pending"),
                           ("leaf2", "pending"), ("leaf3", "pending")]:  # fmt: skip
            state_is(page, job, state)
        nested = page.locator("#flow-tree li[data-job='root'] li[data-job='mid'] "
                              "li[data-job='leaf2']").count()  # fmt: skip
        trio.from_thread.run(complete_leaf1)
        state_is(page, "leaf1", "completed")
        count = page.locator("#flow-tree li[data-job='mid'] > .flow-node .flow-count")
        page.wait_for_function(
            "el => el.textContent.startsWith('1 of 2 open')", arg=count.element_handle()
        )
        page.fill("#flow-job", "mid")
        page.click("#flow-show")
        page.wait_for_selector("#flow-tree > li[data-job='mid']")
        return {"waiting": waiting, "nested": nested, "count": count.text_content()}

    seen = await in_browser(dashboard.url, "flow", steps)
    assert seen["waiting"] == 2  # root and mid wait
    assert seen["nested"] == 1
    assert seen["count"] == "1 of 2 open, 0 failed · policy fail"
