"""The connection interface the verbs use, as a Protocol.

Both ``Connection`` (one server) and ``ClusterConnection`` (a Redis Cluster) provide it;
``echomq.connect(url)`` answers one or the other. Code that only runs commands can be
annotated with :class:`RedisConnection` and accepts both. (Today the verbs are annotated
with ``Connection``, which ``ClusterConnection`` subclasses for that reason alone.)
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Protocol

from ..config import ConnectionConfig

if TYPE_CHECKING:
    from .cluster import ClusterConnection
    from .connection import Arg, Connection

__all__ = ["RedisConnection"]


class RedisConnection(Protocol):
    """What the verbs, the worker and the surfaces need of a connection."""

    config: ConnectionConfig
    sharded_pubsub: bool  # True on a cluster: scripts publish with SPUBLISH

    async def execute(self, *args: Arg) -> Any:
        """One command; its reply. An error reply raises ``ServerError`` (or a subclass)."""

    async def execute_pipeline(self, commands: Sequence[Sequence[Arg]]) -> list[Any]:
        """Several commands in one write; every reply, error replies as values."""

    async def execute_packed(self, packed: bytes) -> Any:
        """One command already packed (``connection.pack``)."""

    async def every_master(self) -> Sequence[RedisConnection]:
        """The connections that together hold every key (one server: itself)."""

    def drop(self) -> None:
        """Break the socket(s) as if the network failed."""

    async def aclose(self) -> None:
        """Close; later commands raise ``ConnectionLost``."""


if TYPE_CHECKING:

    def _both_conform(one: Connection, many: ClusterConnection) -> list[RedisConnection]:
        return [one, many]
