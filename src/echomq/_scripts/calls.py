"""The scripts' calls: what to run (a :class:`ScriptCall`), run EVALSHA-first.

Rule 1: the scripts are read, expanded and hashed at import by ``loader.py``; the first call
is an EVALSHA; on ``NOSCRIPT`` the script's source is sent once with EVAL (which also loads
it), then calls go back to EVALSHA.
Rule 2: a :class:`ScriptCall` is plain data (script, keys, argv, and the function that
reads the reply): the verbs build one without I/O, and the trio and sync drivers both run
it through :func:`evaluate` / :func:`evaluate_sync`. A call kept and made again and again
(``claim``'s, per queue, lease and count) is packed once (:func:`packed_call`): on one
server's trio wire its bytes are sent as they are; a call whose head repeats and whose
tail changes (a lone enqueue) is packed by its verb from a kept ``CommandHead`` and run
by :func:`evaluate_packed`.
Rule 3: on a Redis Cluster (a connection whose ``sharded_pubsub`` is true) a script's
sharded twin runs (``Script.variant``: ``SPUBLISH``, loader.py rule 3).
(``SCRIPTS``, ``Script``, ``SCHEMA_VERSION``, ``REPEAT_FORMAT`` and ``sharded_source`` are
the loader's, importable from here too.)
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any, Generic, Protocol, TypeVar

import attrs

from .._wire.connection import Connection, pack
from .._wire.server_errors import permission_denied
from ..errors import EchoMQError, PermissionDenied, ServerError
from .loader import REPEAT_FORMAT, SCHEMA_VERSION, SCRIPTS, Script, sharded_source
from .replies import translate

__all__ = [
    "Executor",
    "REPEAT_FORMAT",
    "SCHEMA_VERSION",
    "Script",
    "ScriptCall",
    "SCRIPTS",
    "script_call",
    "evaluate",
    "evaluate_packed",
    "evaluate_sync",
    "is_sharded",
    "retry_sync",
    "packed_call",
    "sharded_source",
    "sync_errors",
]

T = TypeVar("T")


@attrs.frozen
class ScriptCall(Generic[T]):
    """A script to run with its keys and argv, and how to read its reply."""

    script: Script
    keys: Sequence[str]
    argv: Sequence[str | bytes | int | float]
    read: Callable[[Any], T]
    #: the ``EVALSHA`` of :meth:`evalsha_args` packed once (:func:`packed_call`): a call
    #: made again and again with the same keys and argv packs nothing on the trio wire
    packed: bytes | None = attrs.field(default=None, kw_only=True, eq=False, repr=False)

    def evalsha_args(self, sharded: bool = False) -> tuple[str | bytes | int | float, ...]:
        """``EVALSHA`` of the script (of its sharded twin when ``sharded``: a cluster)."""
        sha = self.script.variant(sharded).sha
        return ("EVALSHA", sha, len(self.keys), *self.keys, *self.argv)

    def eval_args(self, sharded: bool = False) -> tuple[str | bytes | int | float, ...]:
        source = self.script.variant(sharded).source
        return ("EVAL", source, len(self.keys), *self.keys, *self.argv)


def script_call(
    name: str, keys: Sequence[str], argv: Sequence[Any], read: Callable[[Any], T]
) -> ScriptCall[T]:
    """The call description (:class:`ScriptCall`) of the script named ``name``: what to
    run, with which keys and argv, and how to read the reply. No I/O."""
    return ScriptCall(SCRIPTS[name], keys, argv, read)


def packed_call(sc: ScriptCall[T]) -> ScriptCall[T]:
    """``sc`` with its ``EVALSHA`` packed (for a call kept and made many times)."""
    return attrs.evolve(sc, packed=pack(sc.evalsha_args()))


class Executor(Protocol):
    """What a verb needs of a connection to run one command or script: ``execute``.

    ``Connection``, ``ClusterConnection`` (``_wire/interface.RedisConnection``: the whole
    interface) and the native twin's ``FunctionsConnection`` all provide it.
    """

    async def execute(self, *args: Any) -> Any: ...


AsyncExecutor = Executor  # (its former name)


def is_sharded(conn: object) -> bool:
    """Whether ``conn`` is a cluster's (its scripts publish with SPUBLISH)."""
    return bool(getattr(conn, "sharded_pubsub", False))


async def evaluate(conn: Executor, sc: ScriptCall[T]) -> T:
    """Run ``sc`` on a trio connection; script refusals raise their typed errors."""
    packed = sc.packed
    try:
        try:
            if packed is not None and type(conn) is Connection:  # one server: not sharded
                reply = await conn.execute_packed(packed)
            else:
                reply = await conn.execute(*sc.evalsha_args(is_sharded(conn)))
        except ServerError as exc:
            if not str(exc).startswith("NOSCRIPT"):
                raise
            reply = await conn.execute(*sc.eval_args(is_sharded(conn)))
    except ServerError as exc:
        raise _typed(exc, sc.script) from None
    return sc.read(reply)


async def evaluate_packed(
    conn: Connection, packed: bytes, read: Callable[[Any], T], call: Callable[[], ScriptCall[Any]]
) -> T:
    """:func:`evaluate` of a call packed by its caller on one server's trio wire (a
    ``CommandHead`` and the call's own tail: no :class:`ScriptCall` is made for it):
    ``read`` reads the reply; ``call()`` makes the call itself only when ``packed`` did
    not run (``NOSCRIPT``) or a refusal is typed for its script."""
    try:
        reply = await conn.execute_packed(packed)
    except ServerError as exc:
        sc = call()
        if not str(exc).startswith("NOSCRIPT"):
            raise _typed(exc, sc.script) from None
        try:
            reply = await conn.execute(*sc.eval_args())  # (loads it: EVALSHA from now on)
        except ServerError as again:
            raise _typed(again, sc.script) from None
    return read(reply)


def _typed(exc: ServerError, script: Script | None = None) -> ServerError | EchoMQError:
    """A script's refusal as its typed error; the wire already typed the server's own (an
    ACL refusal of a script is named for the script, with the commands it calls)."""
    if isinstance(exc, PermissionDenied) and script is not None:
        return permission_denied(str(exc), f"script {script.name}", calls_of(script))
    return translate(str(exc)) if type(exc) is ServerError else exc


_CALL = re.compile(r"redis\.p?call\(\s*'([A-Za-z]+)'(?:,\s*'([A-Za-z]+)')?")
_CONTAINERS = frozenset({"OBJECT", "PUBSUB", "XGROUP", "XINFO", "CLIENT", "CLUSTER"})


def calls_of(script: Script) -> str:
    """The commands ``script`` calls, as ACL rules name them (``hget``, ``pubsub|numsub``)."""
    found: set[str] = set()
    for name, sub in _CALL.findall(script.source):
        word = name.upper()
        found.add(f"{word}|{sub.upper()}".lower() if word in _CONTAINERS and sub else word.lower())
    return " ".join(sorted(found))


async def evaluate_reply(conn: Executor, sc: ScriptCall[T], reply: Any) -> T:
    """Read the reply ``sc`` got inside a pipeline (``Connection.execute_pipeline``).

    ``NOSCRIPT`` means it did not run: it is run now through :func:`evaluate` on ``conn``
    (which loads it). Any other error reply raises its typed error.
    """
    if isinstance(reply, ServerError):
        if str(reply).startswith("NOSCRIPT"):
            return await evaluate(conn, sc)
        raise _typed(reply, sc.script)
    return sc.read(reply)


@contextmanager
def sync_errors() -> Iterator[None]:
    """Translate redis-py's exceptions into echomq's (``echomq.sync``, the asyncio and
    blocking drivers), one type per cause as on the trio wire
    (``_wire/drivers/redispy.redis_errors``: a transient refusal,
    ``server_errors.TRANSIENT``, is :class:`Unavailable`), and a script's refusal into its
    typed error (the reply table). (redis-py is imported here, not with echomq: trio
    programs never pay for it.)
    """
    from .._wire.drivers.redispy import redis_errors

    try:
        with redis_errors():
            yield
    except ServerError as exc:
        raise _typed(exc) from None


def retry_sync(call: Callable[[], T], retry_for: float) -> T:
    """``call()`` (redis-py, inside :func:`sync_errors`), sent again with backoff while it
    raises ``Unavailable`` (``redispy.retry_transient``), as the trio wire does."""
    from .._wire.drivers.redispy import retry_transient  # redis-py: not imported with echomq

    return retry_transient(call, retry_for, sync_errors)


def evaluate_sync(
    client: Any, sc: ScriptCall[T], *, sharded: bool = False, retry_for: float = 0.0
) -> T:
    """Run ``sc`` on a redis-py client (``echomq.sync``); same replies, same errors.

    ``sharded``: the client is a ``RedisCluster`` (the sharded twin runs).
    ``retry_for``: seconds (``connect_timeout``) during which a transient refusal
    (``Unavailable``: the script did not run; e.g. "non local key" or ``TRYAGAIN`` while
    its slot moves) is sent again with backoff (:func:`retry_sync`); then it raises.
    """
    import redis

    def run() -> Any:
        try:
            return client.execute_command(*sc.evalsha_args(sharded))
        except redis.exceptions.NoScriptError:
            return client.execute_command(*sc.eval_args(sharded))

    try:
        reply = retry_sync(run, retry_for)
    except PermissionDenied as exc:
        raise _typed(exc, sc.script) from None
    return sc.read(reply)
