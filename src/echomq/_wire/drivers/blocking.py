"""The blocking wire: redis-py behind the verbs' connection interface, for ``echomq.sync``.

Rule 1: the verbs are written once, as coroutines over a connection's ``execute``. A
:class:`BlockingConnection`'s ``execute`` is a coroutine that never suspends: it runs the
command on redis-py and returns. :func:`run_sync` drives a verb's coroutine to its end in
one step, so ``run_sync(admin.drain(conn, "q"))`` is the blocking drain, with every key,
script, gate, loop and reply reader of the trio verb, and no second copy of any of them.
Rule 2: a coroutine that does suspend (it awaited something other than this connection)
is a bug: :func:`run_sync` closes it and raises ``RuntimeError``.
Rule 3: errors as on the trio wire (``redispy.py``); no command is replayed, except a
transient refusal (``Unavailable``: it did not run), sent again with backoff within
``connect_timeout`` as the trio wire and ``scripts.evaluate_sync`` do.
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine, Sequence
from typing import Any, TypeVar

import redis
from redis.cluster import RedisCluster

from ...config import ConnectionConfig
from ..hashslots import command_slot
from .redispy import make_client, redis_errors, retry_transient, wire_error

__all__ = ["BlockingConnection", "run_sync"]

T = TypeVar("T")


def run_sync(coro: Coroutine[Any, Any, T]) -> T:
    """Run a verb's coroutine on a :class:`BlockingConnection` to its end; answer its value.

    Raises:
        RuntimeError: the coroutine suspended (it awaited real I/O of an event loop).
    """
    try:
        coro.send(None)
    except StopIteration as done:
        return done.value  # type: ignore[no-any-return]
    coro.close()
    raise RuntimeError("a verb run by run_sync suspended: it needs an event loop")


class BlockingConnection:
    """A redis-py client as a verbs' connection (``execute``, ``execute_pipeline``,
    ``every_master``). No I/O until the first command; safe to share between threads
    (redis-py's pool hands each thread its own socket).
    """

    def __init__(
        self, config: ConnectionConfig, client: redis.Redis | RedisCluster | None = None
    ) -> None:
        self.config = config
        self.sharded_pubsub = config.cluster  # a cluster's scripts publish with SPUBLISH
        # one server: made now (redis-py connects on first use); a cluster: on first use,
        # when it reads the layout
        if client is None and not config.cluster:
            client = make_client(config)
        self._client = client

    @property
    def client(self) -> redis.Redis | RedisCluster:
        """The redis-py client, made on first use (a cluster's reads its layout then)."""
        if self._client is None:
            with redis_errors():
                self._client = make_client(self.config)
        return self._client

    async def execute(self, *args: Any) -> Any:
        """One command; its reply. Blocks the calling thread (rule 1).

        On a cluster a ``SCAN`` goes to one node (redis-py would run it on every node):
        the master of its ``MATCH`` pattern's hash tag, else any master.
        """
        client: Any = self.client  # redis-py's execute_command is untyped
        if isinstance(client, RedisCluster) and str(args[0]).upper() == "SCAN":
            slot = command_slot(args)
            if slot >= 0:
                node = client.nodes_manager.get_node_from_slot(slot)
            else:
                node = client.get_default_node()  # type: ignore[no-untyped-call]
            return self._retrying(lambda: node.redis_connection.execute_command(*args))
        return self._retrying(lambda: client.execute_command(*args))

    def _retrying(self, call: Callable[[], T]) -> T:
        """``call()`` inside :func:`redis_errors`; a transient refusal (not run) sent again
        with backoff until ``connect_timeout`` has passed, then ``Unavailable`` (rule 3)."""
        return retry_transient(call, self.config.connect_timeout)

    async def execute_pipeline(self, commands: Sequence[Sequence[Any]]) -> list[Any]:
        """Several commands in one write; every reply, error replies as values."""
        client: Any = self.client
        with redis_errors():
            pipe = client.pipeline(transaction=False)
            for command in commands:
                pipe.execute_command(*command)
            replies = pipe.execute(raise_on_error=False)
        return [_value(reply) for reply in replies]

    async def every_master(self) -> Sequence[BlockingConnection]:
        """The connections that together hold every key (one server: itself)."""
        client = self.client
        if not isinstance(client, RedisCluster):
            return [self]
        with redis_errors():
            primaries = client.get_primaries()  # type: ignore[no-untyped-call]
        return [
            BlockingConnection(self.config.for_node(node.host, node.port), node.redis_connection)
            for node in primaries
        ]

    def close(self) -> None:
        """Close the client's sockets (the next command connects again)."""
        if self._client is not None:
            self._client.close()


def _value(reply: Any) -> Any:
    """A pipeline's reply: a redis-py exception becomes the wire's error value."""
    if isinstance(reply, BaseException):
        error = wire_error(reply)
        return error if error is not None else reply
    return reply
