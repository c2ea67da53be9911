"""``echomq demo``: a worker, a producer and the live dashboard on a private Redis.

What it runs (queue ``demo``), again and again until ``duration`` ends or Ctrl-C:
- ``demo.render_video``: long jobs that report progress, write log lines and checkpoint
  their lease (``job.checkpoint()``) every frame;
- ``demo.send_email``: a steady stream of short jobs (the throughput chart);
- ``demo.charge_card``: some cards are declined every time: the job retries with
  backoff, then goes dead with its last error (reprocess it from the dashboard);
- ``demo.nightly_report``: a delayed batch, scheduled a few seconds ahead;
- one render is cancelled while it runs (it ends in state ``cancelled`` with its reason).

With ``url`` None or ``embedded://`` the demo starts a private redis-server child
process and stops it on exit, whatever the exit (duration, Ctrl-C, an error).
"""

from __future__ import annotations

import itertools
import logging
import math
import random
import signal
import sys
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from functools import partial
from typing import Any

import attrs
import trio
from rich.console import Console, Group
from rich.live import Live
from rich.progress_bar import ProgressBar
from rich.table import Table
from rich.text import Text

from .. import admin
from .._worker.worker import Worker
from ..app import Job, Queue, TaskHandle
from ..dashboard import DashboardInfo, serve_dashboard
from ..errors import EchoMQError, JobCancelled, JobFailed

__all__ = ["DEMO_QUEUE", "run_demo"]

DEMO_QUEUE = "demo"
DEFAULT_PORT = 8000
STATES = ("pending", "active", "scheduled", "dead", "completed")
TITLES = ["sunset", "harbour", "mountains", "city-night", "forest", "glacier", "desert", "reef"]
VICTIM = "directors-cut"  # the render that gets cancelled
CUSTOMERS = ["ada", "grace", "linus", "barbara", "ken", "margaret", "guido", "radia"]


class CardDeclined(Exception):
    """The demo's permanent failure."""


@attrs.define(eq=False)
class DemoState:
    """What the terminal shows: renders in flight and the notable outcomes."""

    console: Console
    renders: dict[str, tuple[str, float]] = attrs.field(factory=dict)  # job id -> (title, %)
    victim_started: trio.Event = attrs.field(factory=trio.Event)
    outcomes: dict[str, int] = attrs.field(
        factory=lambda: {"completed": 0, "retried": 0, "dead": 0, "cancelled": 0}
    )

    def say(self, icon: str, text: str, style: str = "") -> None:
        self.console.print(Text.assemble((f"{icon} ", style), text))


def build_queue(url: str, state: DemoState, rng: random.Random) -> Queue:
    """The demo queue and its four tasks."""
    queue = Queue(DEMO_QUEUE, url)

    @queue.task(name="demo.render_video", lease=2.0)
    async def render_video(job: Job, title: str, frames: int) -> dict[str, object]:
        state.renders[job.id] = (title, 0.0)
        if title == VICTIM:
            state.victim_started.set()
        try:
            await job.log(f"rendering {title}: {frames} frames")
            for frame in range(1, frames + 1):
                await trio.sleep(rng.uniform(0.08, 0.2))
                pct = round(100 * frame / frames, 1)
                state.renders[job.id] = (title, pct)
                await job.progress(pct)
                if frame % 10 == 0:
                    await job.log(f"frame {frame}/{frames}")
                await job.checkpoint()  # renews the lease; a cancel lands here
            return {"title": title, "frames": frames}
        finally:
            state.renders.pop(job.id, None)

    @queue.task(name="demo.send_email")
    async def send_email(to: str, subject: str) -> str:
        await trio.sleep(rng.uniform(0.02, 0.15))
        return f"sent to {to}"

    @queue.task(name="demo.charge_card", max_attempts=3, backoff=0.5)
    async def charge_card(job: Job, order: str, amount: float, card: str) -> str:
        await job.log(f"attempt {job.attempt}: charging {amount:.2f} to card {card}")
        await trio.sleep(0.1)
        if card.endswith("0000"):
            raise CardDeclined(f"card {card} declined (insufficient funds)")
        return f"charged {order}"

    @queue.task(name="demo.nightly_report")
    async def nightly_report(job: Job, region: str) -> str:
        for pct in (25, 50, 75, 100):
            await trio.sleep(0.1)
            await job.progress(pct)
        return f"report for {region}"

    return queue


async def produce(queue: Queue, state: DemoState, rng: random.Random) -> None:
    """Enqueue the mix, forever: renders, emails, charges, a delayed batch, one cancel."""
    tasks = queue.tasks
    render, email = tasks["demo.render_video"], tasks["demo.send_email"]
    charge, report = tasks["demo.charge_card"], tasks["demo.nightly_report"]
    orders = itertools.count(3)
    async with trio.open_nursery() as nursery:
        for title in TITLES[:3]:
            await render.delay(title, rng.randint(25, 45))
        batch = [f"region-{n}" for n in range(1, 7)]
        for region in batch:
            await report.apply((region,), delay=4.0)
        state.say("⏰", f"{len(batch)} nightly reports scheduled to run in 4 s", "magenta")
        nursery.start_soon(cancel_one, queue, state)
        for order, card in (("order-1", "4242424242424242"), ("order-2", "4000000000000000")):
            handle = await charge.delay(order, 42.0, card)  # order-2 ends dead in ~1 s
            nursery.start_soon(watch_charge, handle, order, state)
        for tick in itertools.count():
            for _ in range(rng.randint(3, 8)):
                who = rng.choice(CUSTOMERS)
                await email.delay(f"{who}@example.com", subject="your receipt")
            if tick % 3 == 0:
                order = f"order-{next(orders)}"
                card = rng.choice(["4242424242424242", "4000000000000000"])
                handle = await charge.delay(order, round(rng.uniform(5, 300), 2), card)
                nursery.start_soon(watch_charge, handle, order, state)
            if tick % 6 == 5:
                await render.delay(rng.choice(TITLES), rng.randint(25, 45))
            await trio.sleep(1.0)


async def cancel_one(queue: Queue, state: DemoState) -> None:
    """Start a long render, wait until a worker holds it, then cancel it."""
    handle = await queue.tasks["demo.render_video"].apply((VICTIM, 400))
    with trio.move_on_after(10):
        await state.victim_started.wait()
        await trio.sleep(2.0)  # let it make some progress first
        outcome = await handle.cancel("the demo changed its mind")
        state.say("⊘", f"cancel requested for render {handle.id[:8]}: {outcome}", "yellow")
        try:
            await handle.result(timeout=10)
        except JobCancelled as exc:
            state.outcomes["cancelled"] += 1
            state.say("⊘", f"render {handle.id[:8]} stopped: cancelled ({exc})", "yellow")


async def watch_charge(handle: TaskHandle[Any], order: str, state: DemoState) -> None:
    try:
        await handle.result(timeout=30)
    except JobFailed as exc:
        state.outcomes["dead"] += 1
        state.say("✖", f"{order} is dead after 3 attempts: {exc}", "red")
    except (EchoMQError, TimeoutError):
        pass


def render_panel(state: DemoState, stats: admin.QueueStats | None, worker: Worker) -> Group:
    """The live terminal view: counts, worker totals, renders in flight."""
    counts = Table.grid(padding=(0, 3))
    for _ in STATES:
        counts.add_column(justify="right")
    counts.add_row(*(Text(name, style="dim") for name in STATES))
    if stats is not None:
        counts.add_row(*(Text(str(getattr(stats, name)), style="bold") for name in STATES))
    w = worker.statistics()
    totals = Text.assemble(
        ("worker ", "dim"), (f"{w.completed} completed", "green"), "  ",
        (f"{w.retried} retried", "magenta"), "  ", (f"{w.failed} failed", "red"), "  ",
        (f"{w.cancelled} cancelled", "yellow"), "  ", (f"{w.held} running", "cyan"),
    )  # fmt: skip
    bars = Table.grid(padding=(0, 1))
    for title, pct in list(state.renders.values())[:6]:
        bars.add_row(
            Text(f"render {title:<16}"), ProgressBar(total=100, completed=pct, width=30),
            Text(f"{pct:5.1f}%"),
        )  # fmt: skip
    return Group(counts, totals, bars)


async def show(state: DemoState, queue: Queue, worker: Worker) -> None:
    """Refresh the terminal view a few times a second (plain lines when not a terminal)."""
    stats: admin.QueueStats | None = None
    with Live(
        render_panel(state, stats, worker), console=state.console, refresh_per_second=4,
        transient=True,
    ) as live:  # fmt: skip
        while True:
            try:
                stats = await admin.stats(queue.connection, queue.name)
            except EchoMQError:
                pass
            live.update(render_panel(state, stats, worker))
            await trio.sleep(0.5)


@asynccontextmanager
async def redis_url(url: str | None) -> AsyncIterator[tuple[str, bool]]:
    """The URL to use, starting a private redis-server for ``None`` / ``embedded://``."""
    if url is not None and not url.startswith("embedded://"):
        yield url, False
        return
    from .redis_server import open_redis_server

    async with open_redis_server() as server:
        yield server.url, True


async def _dashboard(url: str, port: int | None, nursery: trio.Nursery) -> DashboardInfo:
    start = partial(serve_dashboard, url, queues=[DEMO_QUEUE], interval=0.5)
    info: DashboardInfo
    if port is not None:
        info = await nursery.start(partial(start, port=port))
        return info
    try:
        info = await nursery.start(partial(start, port=DEFAULT_PORT))
        return info
    except* OSError:
        pass  # 8000 is taken: any free port will do
    info = await nursery.start(partial(start, port=0))
    return info


class _ConsoleLog(logging.Handler):
    """echomq's log records as one dim line each on the demo's console (no tracebacks)."""

    def __init__(self, console: Console) -> None:
        super().__init__(logging.INFO)
        self.console = console

    def emit(self, record: logging.LogRecord) -> None:
        self.console.print(Text(f"  {record.name}: {record.getMessage()}", style="dim"))


@contextmanager
def quiet_logs(console: Console) -> Iterator[None]:
    """Route the ``echomq`` logger to the console for the demo's duration."""
    logger = logging.getLogger("echomq")
    handler = _ConsoleLog(console)
    saved = logger.propagate, logger.level
    logger.addHandler(handler)
    logger.propagate = False
    logger.setLevel(logging.WARNING)
    try:
        yield
    finally:
        logger.removeHandler(handler)
        logger.propagate, logger.level = saved


async def wait_for_stop(duration: float | None, console: Console) -> None:
    """Return after ``duration`` seconds, or at SIGINT/SIGTERM (Ctrl-C)."""
    with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        with trio.move_on_after(duration if duration is not None else math.inf):
            async for _ in signals:
                console.print("stopping…")
                return


async def demo_main(
    url: str | None, duration: float | None, port: int | None, dashboard: bool
) -> None:
    console = Console(highlight=False, soft_wrap=True)
    state = DemoState(console=console)
    rng = random.Random(7)
    async with redis_url(url) as (real_url, embedded):
        where = f"a private redis-server at {real_url} (stopped on exit)" if embedded else real_url
        console.print(f"[bold]echomq demo[/bold] on {where}")
        queue = build_queue(real_url, state, rng)
        worker = Worker(queue, concurrency=8, grace=1.0)
        async with queue.open(), trio.open_nursery() as outer:
            # a worker waits for its Redis; the demo would rather say at once it is not there
            await queue.connection.execute("PING")
            await outer.start(worker.serve)
            async with trio.open_nursery() as nursery:
                if dashboard:
                    info = await _dashboard(real_url, port, nursery)
                    console.print(f"dashboard: [bold cyan]{info.login_url}[/bold cyan]")
                forever = "until Ctrl-C"
                console.print(f"running {f'for {duration:g} s' if duration else forever}")
                nursery.start_soon(produce, queue, state, rng)
                nursery.start_soon(show, state, queue, worker)
                await wait_for_stop(duration, console)
                nursery.cancel_scope.cancel()
            worker.shutdown(grace=1.0)  # in-flight jobs get a second, then go back to pending
        async with queue.open():
            stats = await admin.stats(queue.connection, DEMO_QUEUE)
        w = worker.statistics()
        console.print(
            f"done: {w.completed} jobs completed, {w.retried} retried, {w.failed} failed "
            f"({stats.dead} dead), {w.cancelled} cancelled; "
            + ", ".join(f"{name} {getattr(stats, name)}" for name in STATES)
        )


def run_demo(*, url: str | None = None, duration: float | None = None, port: int | None = None,
             dashboard: bool = True) -> int:  # fmt: skip
    """Run the demo until ``duration`` seconds pass or Ctrl-C; answer an exit code."""
    if duration is not None and not duration > 0:
        print("echomq demo: --duration must be > 0", file=sys.stderr)
        return 2
    try:
        with quiet_logs(Console(highlight=False, soft_wrap=True)):
            trio.run(demo_main, url, duration, port, dashboard)
    except (EchoMQError, OSError, BaseExceptionGroup) as exc:
        from ..dashboard.hub import first_error

        error = first_error(exc)
        if not isinstance(error, EchoMQError | OSError):
            raise
        print(f"echomq demo: {error}", file=sys.stderr)
        return 1
    return 0
