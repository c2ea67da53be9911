"""The Lua scripts: read from ``lua/*.lua`` at import, run EVALSHA-first.

Rule 1: one file per transition, named after its verb; the sha1 is computed here, so the
first call is an EVALSHA; on ``NOSCRIPT`` the script's source is sent once with EVAL
(which also loads it), then calls go back to EVALSHA.
Rule 2: a :class:`ScriptCall` is plain data (script, keys, argv, and the function that
reads the reply): the verbs build one without I/O, and the trio and sync drivers both run
it through :func:`evaluate` / :func:`evaluate_sync`.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from importlib import resources
from typing import Any, Generic, Protocol, TypeVar

import attrs

from ..errors import ConnectionLost, ServerError
from .replies import translate

__all__ = ["Script", "ScriptCall", "SCRIPTS", "call", "evaluate", "evaluate_sync", "sync_errors"]

T = TypeVar("T")


@attrs.frozen
class Script:
    """One Lua transition: its name (the file's stem), source and sha1."""

    name: str
    source: str = attrs.field(repr=False)
    sha: str


def _load_all() -> Mapping[str, Script]:
    found: dict[str, Script] = {}
    for entry in resources.files(__package__).joinpath("lua").iterdir():
        if entry.name.endswith(".lua"):
            source = entry.read_text(encoding="utf-8")
            sha = hashlib.sha1(source.encode()).hexdigest()
            found[entry.name[:-4]] = Script(entry.name[:-4], source, sha)
    return found


SCRIPTS: Mapping[str, Script] = _load_all()


@attrs.frozen
class ScriptCall(Generic[T]):
    """A script to run with its keys and argv, and how to read its reply."""

    script: Script
    keys: Sequence[str]
    argv: Sequence[str | bytes | int | float]
    read: Callable[[Any], T]

    def evalsha_args(self) -> tuple[str | bytes | int | float, ...]:
        return ("EVALSHA", self.script.sha, len(self.keys), *self.keys, *self.argv)

    def eval_args(self) -> tuple[str | bytes | int | float, ...]:
        return ("EVAL", self.script.source, len(self.keys), *self.keys, *self.argv)


def call(
    name: str, keys: Sequence[str], argv: Sequence[Any], read: Callable[[Any], T]
) -> ScriptCall[T]:
    """Build a :class:`ScriptCall` for the script named ``name``."""
    return ScriptCall(SCRIPTS[name], keys, argv, read)


class AsyncExecutor(Protocol):
    async def execute(self, *args: Any) -> Any: ...


async def evaluate(conn: AsyncExecutor, sc: ScriptCall[T]) -> T:
    """Run ``sc`` on a trio connection; script refusals raise their typed errors."""
    try:
        try:
            reply = await conn.execute(*sc.evalsha_args())
        except ServerError as exc:
            if not str(exc).startswith("NOSCRIPT"):
                raise
            reply = await conn.execute(*sc.eval_args())
    except ServerError as exc:
        raise translate(str(exc)) from None
    return sc.read(reply)


async def evaluate_reply(conn: AsyncExecutor, sc: ScriptCall[T], reply: Any) -> T:
    """Read the reply ``sc`` got inside a pipeline (``Connection.execute_pipeline``).

    ``NOSCRIPT`` means it did not run: it is run now through :func:`evaluate` on ``conn``
    (which loads it). Any other error reply raises its typed error.
    """
    if isinstance(reply, ServerError):
        if str(reply).startswith("NOSCRIPT"):
            return await evaluate(conn, sc)
        raise translate(str(reply))
    return sc.read(reply)


@contextmanager
def sync_errors() -> Iterator[None]:
    """Translate redis-py's exceptions into echomq's (``echomq.sync``).

    A dropped or unreachable connection is :class:`ConnectionLost`, as on the trio wire;
    an error reply goes through the reply table.
    """
    import redis

    try:
        yield
    except redis.exceptions.ResponseError as exc:
        raise translate(str(exc)) from None
    except (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError) as exc:
        raise ConnectionLost(str(exc)) from exc


def evaluate_sync(client: Any, sc: ScriptCall[T]) -> T:
    """Run ``sc`` on a redis-py client (``echomq.sync``); same replies, same errors."""
    import redis

    with sync_errors():
        try:
            reply = client.execute_command(*sc.evalsha_args())
        except redis.exceptions.NoScriptError:
            reply = client.execute_command(*sc.eval_args())
    return sc.read(reply)
