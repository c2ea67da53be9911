"""Sharded pub/sub on a Redis Cluster: ``SSUBSCRIBE`` on the master that serves each channel.

On a cluster echomq's scripts publish with ``SPUBLISH`` (``scripts.Script.sharded``): a
message goes to the shard that serves the channel's slot, not to every node. A queue's
channel ``emq:{q}:events`` carries the queue's hash tag, so it lives where the queue does.
``open_pubsub(cluster_url)`` answers a :class:`ClusterPubSub`; ``subscribe`` there means
``SSUBSCRIBE`` (patterns do not exist for sharded channels: ``psubscribe`` is refused).

Rule 1: one socket per master that serves a subscribed channel; each channel is
subscribed on the master of its slot, and ``subscribe`` returns once that master confirmed.
Rule 2: a channel whose slot moves (the server sends an unasked ``sunsubscribe``, or
answers ``MOVED``) or whose node's socket drops (a dead master, a failover) is subscribed
again where the layout says its slot is served now, with backoff, for as long as the
subscription runs. Messages published in between are lost (events are at most once, as on
one server); ``reconnects`` counts these moves.
Rule 3: messages of every node come out of one iterator, in arrival order per node.
"""

from __future__ import annotations

import logging
from typing import Any

import trio

from .._jitter import Backoff
from ..config import ConnectionConfig
from ..errors import ConnectionLost, InvalidArgument, NotACluster, TLSError
from .cluster import ClusterConnection, open_cluster
from .connection import TRANSPORT_ERRORS, Parser, ReplyError, new_parser, open_stream, pack
from .hashslots import key_slot
from .pubsub import Message, PubSub, _Confirm, authenticate
from .server_errors import server_error
from .topology import Address, parse_redirect

__all__ = ["ClusterPubSub"]

log = logging.getLogger("echomq.wire")

_NODE_CONNECT_TIMEOUT = 1.0


class _Shard:
    """One socket to one master, subscribed to the channels homed there."""

    def __init__(self, owner: ClusterPubSub, address: Address) -> None:
        self.owner = owner
        self.address = address
        self.stream: trio.abc.Stream | None = None
        self.lock = trio.Lock()
        self.closed = False

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Connect, subscribe to this node's channels, read until the socket ends; then
        hand every channel homed here back to the owner to be subscribed again."""
        owner = self.owner
        config = owner.config.for_node(*self.address)
        stream: trio.abc.Stream | None = None
        started = False
        try:
            try:
                with trio.fail_after(min(owner.config.connect_timeout, _NODE_CONNECT_TIMEOUT)):
                    stream = await open_stream(config)
                    parser = new_parser()
                    async with self.lock:
                        await authenticate(stream, parser, config)
                        channels = owner.homed_at(self.address)
                        if channels:
                            await stream.send_all(
                                b"".join(pack(("SSUBSCRIBE", c)) for c in channels)
                            )
                        self.stream = stream
                task_status.started()
                started = True
                await self._read(stream, parser)
            except (*TRANSPORT_ERRORS, ConnectionLost, trio.TooSlowError, TLSError) as exc:
                if isinstance(exc, TLSError) and not started:
                    raise  # a certificate nobody trusts: retrying cannot help
                log.debug("sharded subscription on %s:%s ended: %r", *self.address, exc)
        finally:
            self.closed = True
            self.stream = None
            owner.shard_ended(self)
            if stream is not None:
                with trio.CancelScope(shield=True):
                    await trio.aclose_forcefully(stream)
        if not started:  # (not reached when cancelled) the caller of start() goes on
            task_status.started()

    async def write(self, *commands: tuple[str, ...]) -> bool:
        """Send ``commands``; False when not connected (the channel is homed again later)."""
        async with self.lock:
            if self.stream is None:
                return False
            try:
                await self.stream.send_all(b"".join(pack(c) for c in commands))
            except TRANSPORT_ERRORS:
                return False  # the reader sees the end and hands the channels back
            return True

    async def _read(self, stream: trio.abc.Stream, parser: Parser) -> None:
        while True:
            while (reply := parser.gets()) is not False:
                self.owner.dispatch(self, reply)
            data = await stream.receive_some(1 << 16)
            if not data:
                raise trio.BrokenResourceError("server closed the connection")
            parser.feed(data)


class ClusterPubSub(PubSub):
    """Sharded subscriptions across a cluster. Open with ``open_pubsub(cluster_url)``."""

    def __init__(self, config: ConnectionConfig, *, buffer: int = 1024) -> None:
        super().__init__(config, buffer=buffer)
        self._home: dict[str, Address] = {}  # channel -> the master it is subscribed on
        self._shards: dict[Address, _Shard] = {}
        self._homeless: set[str] = set()
        self._wake = trio.Event()
        self._layout_stale = False
        self._conn: ClusterConnection | None = None
        self._nursery: trio.Nursery | None = None

    # -- the PubSub surface ------------------------------------------------------------

    async def subscribe(self, *channels: str) -> None:
        """``SSUBSCRIBE`` each channel on its slot's master; return once all confirmed."""
        wanted = self._wanted["channel"]
        new = sorted(set(channels) - wanted)
        wanted.update(new)
        for name in new:
            self._confirm["channel", name] = _Confirm()
        waits = [c for n in channels if (c := self._confirm.get(("channel", n))) is not None]
        if new:
            await self._place(new)
        for confirm in waits:
            await confirm.event.wait()
            if confirm.error is not None:
                wanted.difference_update(channels)
                raise server_error(confirm.error, "SSUBSCRIBE refused")

    async def unsubscribe(self, *channels: str) -> None:
        wanted = self._wanted["channel"]
        for name in sorted(set(channels) & wanted):
            wanted.discard(name)
            self._homeless.discard(name)
            address = self._home.pop(name, None)
            shard = self._shards.get(address) if address is not None else None
            if shard is not None:
                await shard.write(("SUNSUBSCRIBE", name))

    async def psubscribe(self, *patterns: str) -> None:
        raise InvalidArgument("sharded pub/sub (a Redis Cluster) has no pattern subscriptions")

    async def punsubscribe(self, *patterns: str) -> None:
        raise InvalidArgument("sharded pub/sub (a Redis Cluster) has no pattern subscriptions")

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Keep every subscription homed until cancelled (started by ``open_pubsub``).

        The first layout read must succeed (``ConnectionLost`` or ``NotACluster``
        otherwise); later moves are retried with backoff for as long as it runs.
        """
        async with open_cluster(self.config) as conn:
            self._conn = conn
            await conn.refresh()
            async with trio.open_nursery() as nursery:
                self._nursery = nursery
                nursery.start_soon(self._rehome_loop)
                task_status.started()

    # -- homing channels ---------------------------------------------------------------

    def homed_at(self, address: Address) -> list[str]:
        return sorted(c for c, a in self._home.items() if a == address)

    async def _place(self, channels: list[str]) -> None:
        """Subscribe ``channels`` where the layout says their slots are served."""
        conn = self._conn
        assert conn is not None and self._nursery is not None
        layout = conn.slot_map or await conn.refresh()
        by_node: dict[Address, list[str]] = {}
        for name in channels:
            owner = layout.owners[key_slot(name)]
            if owner is None:
                self._lost(name)
                continue
            self._homeless.discard(name)
            self._home[name] = owner
            by_node.setdefault(owner, []).append(name)
        for address, names in by_node.items():
            shard = self._shards.get(address)
            if shard is None or shard.closed:
                shard = self._shards[address] = _Shard(self, address)
                await self._nursery.start(shard.run)  # subscribes everything homed there
                continue
            if not await shard.write(*(("SSUBSCRIBE", name) for name in names)):
                for name in names:
                    self._lost(name)

    def _lost(self, name: str, *, stale: bool = False) -> None:
        """``name`` must be subscribed again (and, if ``stale``, after a fresh layout)."""
        if name not in self._wanted["channel"]:
            return
        self._home.pop(name, None)
        self._homeless.add(name)
        self._layout_stale = self._layout_stale or stale
        self._wake.set()

    def shard_ended(self, shard: _Shard) -> None:
        """A node's socket ended: its channels are homed again once the layout is read."""
        if self._shards.get(shard.address) is shard:
            del self._shards[shard.address]
        for name in self.homed_at(shard.address):
            self._lost(name, stale=True)

    async def _rehome_loop(self) -> None:
        backoff = Backoff(0.02, 1.0)
        while True:
            if not self._homeless:
                self._wake = trio.Event()
                await self._wake.wait()
                continue
            await backoff.sleep()
            conn = self._conn
            assert conn is not None
            try:
                if self._layout_stale:
                    self._layout_stale = False
                    await conn.refresh()
                names = sorted(self._homeless)
                await self._place(names)
            except (ConnectionLost, NotACluster) as exc:
                log.debug("sharded subscriptions: cannot read the layout (%s)", exc)
                self._layout_stale = True
                continue
            if any(n in self._home for n in names):
                self.reconnects += 1
            if not self._homeless:
                backoff.reset()

    # -- replies -----------------------------------------------------------------------

    def dispatch(self, shard: _Shard, reply: Any) -> None:
        """One reply from ``shard``: a message, a confirmation, a lost channel, or an error."""
        if isinstance(reply, ReplyError):
            self._refused(shard, str(reply))
            return
        if not isinstance(reply, list) or not reply:
            return
        kind = reply[0]
        if kind == b"smessage":
            try:
                self._send.send_nowait(Message(reply[1].decode(), reply[2]))
            except trio.WouldBlock:
                self.dropped += 1
            return
        name: str = reply[1].decode() if isinstance(reply[1], bytes) else str(reply[1])
        if kind == b"ssubscribe":
            waiting = self._confirm.pop(("channel", name), None)
            if waiting is not None:
                waiting.event.set()
        elif kind == b"sunsubscribe":
            if self._home.get(name) == shard.address:  # unasked: its slot moved away
                self._lost(name, stale=True)

    def _refused(self, shard: _Shard, message: str) -> None:
        redirect = parse_redirect(message, shard.address[0])
        if redirect is not None:  # SSUBSCRIBE sent to a node that no longer serves the slot
            conn = self._conn
            if conn is not None and conn.slot_map is not None:
                conn.slot_map.move(redirect.slot, redirect.address)
            for name in self.homed_at(shard.address):
                if key_slot(name) == redirect.slot:
                    self._lost(name)
            return
        # anything else (NOPERM...): fail the subscribes still waiting on this node
        for name in self.homed_at(shard.address):
            confirm = self._confirm.pop(("channel", name), None)
            if confirm is not None:
                confirm.error = message
                confirm.event.set()
