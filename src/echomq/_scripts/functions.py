"""The native twin (DESIGN.md section 6): the same Lua transitions as a Redis Functions library.

Every script under ``lua/`` becomes ``emq_<name>`` in the library ``echomq``: the body is
the script's own source (includes expanded), wrapped in a function whose parameters are
named ``KEYS`` and ``ARGV``, so the keys, argument order and replies are the script's, by
construction. On a Redis Cluster the library is built from the scripts' sharded twins
(``SPUBLISH``: an event goes to the queue's shard), exactly as ``EVALSHA`` runs them there.
``FunctionsConnection`` routes the verbs through ``FCALL`` instead of ``EVALSHA``.

What the conformance test (tests/conformance) proves: that wrapping a script as a function
changes nothing (same replies, same keyspace, both checked against ``TRANSITIONS`` and
against hand-written expected changes for a few transitions). It does not prove the Lua
right by comparing it with itself: the hand-written expectations and the transition table
are the independent checks.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .._wire.connection import Arg
from .calls import Executor, is_sharded
from .loader import SCRIPTS, Script

__all__ = ["LIBRARY", "FunctionsConnection", "function_name", "library_source", "load_library"]

LIBRARY = "echomq"


def function_name(script: Script) -> str:
    return f"emq_{script.name.split('@', 1)[0]}"


def library_source(scripts: Mapping[str, Script] = SCRIPTS, *, sharded: bool = False) -> str:
    """The library text for ``FUNCTION LOAD``, built from the scripts' sources (their
    sharded twins when ``sharded``: a cluster)."""
    parts = [f"#!lua name={LIBRARY}"]
    for name in sorted(scripts):
        script = scripts[name].variant(sharded)
        parts.append(
            f"redis.register_function('{function_name(script)}', function(KEYS, ARGV)\n"
            f"{script.source}\nend)"
        )
    return "\n".join(parts) + "\n"


async def load_library(conn: Executor) -> None:
    """Load (or replace) the library on the server (on every master of a cluster, with the
    sharded twins)."""
    await conn.execute("FUNCTION", "LOAD", "REPLACE", library_source(sharded=is_sharded(conn)))


class FunctionsConnection:
    """A connection whose script calls run as ``FCALL emq_<name>`` instead of ``EVALSHA``.

    Everything else passes through. Call :func:`load_library` once first.
    """

    def __init__(self, conn: Executor) -> None:
        self.conn = conn
        self.sharded_pubsub = is_sharded(conn)
        self._by_sha: dict[str, Script] = {}
        for script in SCRIPTS.values():
            self._by_sha[script.sha] = script
            self._by_sha[script.variant(True).sha] = script

    async def execute(self, *args: Arg) -> Any:
        if args and args[0] == "EVALSHA":
            script = self._by_sha[str(args[1])]
            return await self.conn.execute("FCALL", function_name(script), *args[2:])
        return await self.conn.execute(*args)
