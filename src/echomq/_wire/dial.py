"""Opening connections: ``connect`` (commands), ``open_pubsub`` (subscriptions) and
``probe`` (one attempt, for callers with a retry loop of their own).

Rule 1: this is the one place that picks the single-server class or the Redis Cluster one
from the URL (``redis+cluster://`` / ``rediss+cluster://``): ``Connection`` /
``ClusterConnection`` for commands, ``PubSub`` / ``ClusterPubSub`` (sharded) for
subscriptions, one server's ``PING`` or a cluster's layout for ``probe``. The modules of
those classes do not import each other's factories, so the wire has no import cycle.
Rule 2: no I/O happens until the first command; ``open_pubsub`` returns once the server
confirmed the channels given.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from .._trio import open_service_nursery
from ..config import ConnectionConfig, parse_url, resolve_url
from .cluster import open_cluster
from .cluster_pubsub import ClusterPubSub
from .connection import Connection, open_connection
from .connection import probe as probe_server
from .pubsub import PubSub

__all__ = ["connect", "open_pubsub", "probe"]


async def probe(url: str | ConnectionConfig, **options: Any) -> None:
    """One attempt, without backoff, to reach ``url``: one server answers ``PING``; a
    cluster's layout is read from the first of its seed nodes that answers, then its first
    master answers ``PING`` (a seed that is gone does not make a healthy cluster look down).

    Raises:
        ConnectionLost: nothing answered, or the server is not ready (``LOADING``...).
        NotACluster: a ``redis+cluster://`` URL names a server whose cluster mode is off.
        TLSError, AuthenticationError, PermissionDenied, ServerError: as for a command.
    """
    config = parse_url(url, **options)
    if not config.cluster:
        await probe_server(config)
        return
    async with open_cluster(config) as cluster:
        await cluster.refresh()
        await cluster.execute("PING")


@asynccontextmanager
async def connect(
    url: str | ConnectionConfig | None = None, **options: Any
) -> AsyncIterator[Connection]:
    """Open a multiplexed connection; no I/O happens until the first command. ``url``
    None: ``$ECHOMQ_URL``, else ``redis://127.0.0.1:6379/0`` (``config.resolve_url``).

    ``options`` override fields of :class:`~echomq.config.ConnectionConfig`
    (``connect_timeout``, ``ssl_context``, ``client_name``...).
    A ``redis+cluster://`` URL answers a ``ClusterConnection`` (``_wire/cluster.py``).
    """
    config = parse_url(resolve_url() if url is None else url, **options)
    if config.cluster:
        async with open_cluster(config) as cluster:
            yield cluster
    else:
        async with open_connection(config) as conn:
            yield conn


@asynccontextmanager
async def open_pubsub(
    url: str | ConnectionConfig, *channels: str, buffer: int = 1024
) -> AsyncIterator[PubSub]:
    """A pub/sub connection subscribed to ``channels``; kept alive until the block exits.

    The block starts once the server has confirmed ``channels``. On a Redis Cluster
    (``redis+cluster://``) the subscriptions are sharded (``_wire/cluster_pubsub.py``).
    """
    config = parse_url(url)
    pubsub = (
        ClusterPubSub(config, buffer=buffer) if config.cluster else PubSub(config, buffer=buffer)
    )
    async with open_service_nursery() as nursery:
        await nursery.start(pubsub.run)
        if channels:
            await pubsub.subscribe(*channels)
        yield pubsub
