"""Healthy and poison tasks for the poison-job test (a worker subprocess serves this queue).

``python -m echomq worker _poison_tasks:queue``; the queue name, URL and lease come
from the environment the test sets. Process tasks are module-level so the spawned pool
children can import them.
"""

from __future__ import annotations

import math
import os
import sys
from typing import Any

import echomq

queue = echomq.Queue(os.environ.get("EMQ_TEST_QUEUE", "poison"))
LEASE = float(os.environ.get("EMQ_TEST_LEASE", "30"))


def task(name: str, **options: Any) -> Any:
    return queue.task(name=name, lease=LEASE, **options)


# -- healthy ---------------------------------------------------------------------------------


@task("ok")
async def ok(n: int) -> int:
    return n + 1


@task("ok-thread")
def ok_thread(n: int) -> int:
    return n * 2


# a child killed by os._exit (below) breaks the pool under any call it was running: such a
# bystander fails with BrokenProcessPool and is retried in a fresh pool
@task("ok-process", process=True, max_attempts=3, backoff=0)
def ok_process(n: int) -> int:
    return n * 3


# -- poison ----------------------------------------------------------------------------------


@task("deep-result")
async def deep_result() -> Any:
    value: Any = []
    for _ in range(5_000):
        value = [value]
    return value


@task("retry-inf", max_attempts=5)
async def retry_inf() -> None:
    raise echomq.Retry(delay=math.inf)


@task("retry-soon", max_attempts=5)
async def retry_soon() -> None:
    raise echomq.Retry(delay="soon")  # type: ignore[arg-type]


@task("retry-far", max_attempts=5)
async def retry_far() -> None:
    raise echomq.Retry(delay=1e12)


def _backoff_raises(failures: int) -> float:
    raise ZeroDivisionError("backoff bug")


@task("backoff-raises", max_attempts=5, backoff=_backoff_raises)
async def backoff_raises() -> None:
    raise ValueError("fails once")


@task("backoff-nan", max_attempts=5, backoff=lambda failures: math.nan)
async def backoff_nan() -> None:
    raise ValueError("fails once")


@task("loud")
async def loud() -> None:
    raise ValueError("x" * 500_000)


class Unprintable(Exception):
    def __str__(self) -> str:
        raise RuntimeError("no str")


@task("unprintable")
async def unprintable() -> None:
    raise Unprintable()


@task("exit")
async def leave() -> None:
    sys.exit(3)


@task("interrupt")
def interrupt() -> None:
    raise KeyboardInterrupt


@task("process-exit", process=True)
def process_exit() -> None:
    sys.exit(4)


@task("process-kill", process=True)
def process_kill() -> None:
    os._exit(1)


@task("os-exit")
async def os_exit() -> None:
    os._exit(1)  # kills the worker process itself: bounded by recovery, not survivable
