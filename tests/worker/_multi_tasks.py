"""Two queues for one worker subprocess (``echomq worker _multi_tasks:first
_multi_tasks:second``); their names come from the environment the test sets."""

from __future__ import annotations

import os

import echomq

first = echomq.Queue(os.environ["EMQ_TEST_FIRST"])
second = echomq.Queue(os.environ["EMQ_TEST_SECOND"])


@first.task(name="echo")
async def echo_first(n: int) -> str:
    return f"first {n}"


@second.task(name="echo")
async def echo_second(n: int) -> str:
    return f"second {n}"
