"""The native twin (DESIGN.md section 6): the same Lua transitions as a Redis Functions library.

Every script under ``lua/`` becomes ``emq_<name>`` in the library ``echomq``: the body is
the script's own source, wrapped in a function whose parameters are named ``KEYS`` and
``ARGV``, so the keys, argument order and replies are the script's, by construction.
``FunctionsConnection`` routes the verbs through ``FCALL`` instead of ``EVALSHA``; the
differential test (tests/conformance) runs every transition both ways and compares
replies and keyspace.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .connection import Arg, Connection
from .scripts import SCRIPTS, Script

__all__ = ["LIBRARY", "FunctionsConnection", "function_name", "library_source", "load_library"]

LIBRARY = "echomq"


def function_name(script: Script) -> str:
    return f"emq_{script.name}"


def library_source(scripts: Mapping[str, Script] = SCRIPTS) -> str:
    """The library text for ``FUNCTION LOAD``, built from the scripts' sources."""
    parts = [f"#!lua name={LIBRARY}"]
    for name in sorted(scripts):
        script = scripts[name]
        parts.append(
            f"redis.register_function('{function_name(script)}', function(KEYS, ARGV)\n"
            f"{script.source}\nend)"
        )
    return "\n".join(parts) + "\n"


async def load_library(conn: Connection) -> None:
    """Load (or replace) the library on the server."""
    await conn.execute("FUNCTION", "LOAD", "REPLACE", library_source())


class FunctionsConnection:
    """A connection whose script calls run as ``FCALL emq_<name>`` instead of ``EVALSHA``.

    Everything else passes through. Call :func:`load_library` once first.
    """

    def __init__(self, conn: Connection) -> None:
        self.conn = conn
        self._by_sha = {s.sha: s for s in SCRIPTS.values()}

    async def execute(self, *args: Arg) -> Any:
        if args and args[0] == "EVALSHA":
            script = self._by_sha[str(args[1])]
            return await self.conn.execute("FCALL", function_name(script), *args[2:])
        return await self.conn.execute(*args)
