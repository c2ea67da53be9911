"""Helpers for the cluster tests: bounded waits on observable state, node counters."""

from __future__ import annotations

from _waits import until as until
from echomq.testing import ClusterNode


def error_replies(node: ClusterNode, word: str) -> int:
    """How many ``word`` error replies (CLUSTERDOWN, TRYAGAIN, ASK...) ``node`` has sent."""
    stats = node.info("errorstats").get(f"errorstat_{word}", "count=0")
    return int(stats.split(",")[0].split("=")[1])
