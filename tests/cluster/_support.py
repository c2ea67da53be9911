"""Helpers for the cluster tests: bounded waits on observable state, node counters."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import trio

from echomq.testing import ClusterNode


async def until(check: Callable[[], bool | Awaitable[bool]], within: float = 5.0) -> None:
    """Poll (bounded) until ``check()`` answers True."""
    with trio.fail_after(within):
        while True:
            answer = check()
            if not isinstance(answer, bool):
                answer = await answer
            if answer:
                return
            await trio.sleep(0.01)


def error_replies(node: ClusterNode, word: str) -> int:
    """How many ``word`` error replies (CLUSTERDOWN, TRYAGAIN, ASK...) ``node`` has sent."""
    stats = node.info("errorstats").get(f"errorstat_{word}", "count=0")
    return int(stats.split(",")[0].split("=")[1])
