"""The trio wire for a Redis Cluster: one auto-pipelined ``Connection`` per master.

``echomq.connect("redis+cluster://h1:p1,h2:p2/")`` answers a :class:`ClusterConnection`: the
same methods the verbs use (``execute``, ``execute_pipeline``, ``execute_packed``, ``drop``,
``aclose``, ``config``), so every verb runs on a cluster unchanged.

Rule 1 (layout): read from ``CLUSTER SHARDS`` (else ``CLUSTER SLOTS``) of the first node
that answers, at the first command (no I/O before), and again after a ``MOVED``, a dropped
node or ``CLUSTERDOWN``. The URL's nodes are seeds; nodes learned from the layout are
asked first.
Rule 2 (routing): a command goes to the master of its first key's slot
(:mod:`echomq._wire.hashslots`); keyless ones to the master of the lowest slot; ``SCRIPT
LOAD``/``FUNCTION LOAD``/``FLUSHALL``... to every master. A pipeline goes to the one master
of its slot: keys of two slots are refused before any I/O (``CrossSlot``).
Rule 3 (redirects are not runs): ``MOVED`` patches the map and the command goes to the new
master; ``ASK`` sends ``ASKING`` and the command to the named node in one write;
``TRYAGAIN``, ``CLUSTERDOWN``, ``LOADING``, ``MASTERDOWN``, ``BUSY``, ``UNBLOCKED`` (a
blocked pop on a master that became a replica) and a script's "non local key" are sent
again after a backoff, until ``connect_timeout`` (then ``ClusterDown`` or ``Unavailable``:
transient errors, ``errors.TRANSIENT``). None of these ran, so sending again is safe. In a
pipeline only the commands answered so are sent again, in order.
Rule 4 (no replay): a socket that drops fails every command in flight on it with
``ConnectionLost``, never re-sent, exactly as on one node. A node that cannot be reached
before anything was written (nothing ran) is skipped: the layout is read again and the
command goes to whoever serves its slot, until ``connect_timeout``.

``ClusterConnection`` subclasses ``Connection`` only so that code annotated with
``Connection`` accepts it; it shares none of its state (see ``protocol.RedisConnection``).
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import Any

import attrs
import hiredis
import trio

from .._jitter import Backoff
from .._trio import open_service_nursery
from ..config import ConnectionConfig
from ..errors import ClusterDown, ClusterError, ConnectionLost, CrossSlot, NotACluster, ServerError
from .connection import Arg, Connection, ReplyError, pack, pack_command
from .hashslots import ALL_MASTERS, ANY_MASTER, command_slot, key_slot, pipeline_slot
from .server_errors import TRANSIENT, first_word, is_transient, server_error
from .topology import Address, SlotMap, parse_redirect, parse_shards, parse_slots

__all__ = ["ClusterConnection", "open_cluster"]

log = logging.getLogger("echomq.wire")

_MAX_HOPS = 16  # redirects followed for one command before giving up
_NODE_CONNECT_TIMEOUT = 1.0  # per node: a dead master is skipped after this, not connect_timeout
# First words of replies that mean "not run here, now": sent again after a backoff
# (server_errors.TRANSIENT: the one table; NONLOCAL is a script's "non local key" refusal
# mid-migration, which stopped before its first write, docs/lua.md rule 1).
_WAIT = TRANSIENT
_WAIT_IN_PIPELINE = frozenset({"TRYAGAIN", "CLUSTERDOWN", "UNBLOCKED", "NONLOCAL"})
_ASKING = pack(("ASKING",))


class _NotSent(Exception):
    """A node could not be reached: nothing was written, so the command did not run."""

    def __init__(self, lost: ConnectionLost) -> None:
        super().__init__(str(lost))
        self.lost = lost


class _Uncovered(Exception):
    """The layout names no master for the slot."""


def cluster_error(message: str) -> ServerError:
    """The typed error for an error reply on a cluster: a redirect left unfollowed is a
    ``ClusterError``; the rest as on one server (``Unavailable``/``ClusterDown`` for the
    transient ones)."""
    if first_word(message) in ("MOVED", "ASK"):
        return ClusterError(message)
    return server_error(message)


class ClusterConnection(Connection):
    """A Redis Cluster behind one object. Open one with ``echomq.connect(cluster_url)``.

    Safe to share between any number of tasks, like ``Connection``. Use one of its own
    for blocking commands (``BLPOP`` holds up the connection of that master).
    """

    sharded_pubsub = True  # scripts publish with SPUBLISH here (see scripts.ScriptCall)

    def __init__(self, config: ConnectionConfig, nursery: trio.Nursery) -> None:
        # Connection.__init__ is deliberately not called: the nodes hold the sockets.
        self.config = config
        self._nursery = nursery
        self._nodes: dict[Address, Connection] = {}
        self._map: SlotMap | None = None
        self._version = 0  # layouts read so far
        self._refresh_lock = trio.Lock()
        self._refresh_queued = False
        self._suspects: dict[Address, None] = {}  # nodes that failed lately: asked last
        self._closed = False
        self.redirects = 0  # MOVED and ASK replies followed
        self.layouts = 0  # layouts read

    # -- the interface the verbs use ----------------------------------------------------

    @property
    def reconnects(self) -> int:  # type: ignore[override]
        """Sockets made again, over every node."""
        return sum(node.reconnects for node in self._nodes.values())

    async def execute(self, *args: Arg) -> Any:
        """Send one command to the master of its slot; answer its reply.

        Raises:
            ConnectionLost: the socket dropped with the command in flight (never re-sent),
                or no node serving its slot could be reached within ``connect_timeout``.
            ClusterDown: the slot stayed without a master for ``connect_timeout``.
            ServerError: any other error reply.
        """
        slot = command_slot(args)
        if slot == ALL_MASTERS:
            return await self._every_master(args)
        sent: tuple[Address, list[Any]] | None = None
        layout = self._map
        if slot >= 0 and layout is not None and not self._closed:
            # the common case, kept short: the slot's master is known and connected
            owner = layout.owners[slot]
            node = self._nodes.get(owner) if owner is not None else None
            session = node._session if node is not None else None
            if (
                owner is not None
                and session is not None
                and session.broken is None
                and not session.idle_closed()
            ):
                try:
                    reply = await session.request(pack_command(args))
                except ConnectionLost:
                    self._suspect(owner)
                    raise
                if not isinstance(reply, ReplyError):
                    return reply
                sent = (owner, [reply])
        reply = (await self._run((args,), slot, wait=_WAIT, sent=sent))[0]
        if isinstance(reply, ReplyError):
            raise cluster_error(str(reply))
        return reply

    async def execute_at(self, key: Arg, *args: Arg) -> Any:
        """Run ``args`` (a keyless command: ``INFO``, ``SCRIPT EXISTS``...) on the master
        that serves ``key``'s slot, e.g. the node of a queue (``Keyspace(q).meta``)."""
        reply = (await self._run((args,), key_slot(key), wait=_WAIT))[0]
        if isinstance(reply, ReplyError):
            raise cluster_error(str(reply))
        return reply

    async def execute_packed(self, packed: bytes) -> Any:
        """Like :meth:`execute`, for a command already packed (it is read back to route it)."""
        reader = hiredis.Reader()
        reader.feed(packed)
        args = reader.gets()
        if not isinstance(args, list) or not args or reader.gets() is not False:
            raise ValueError("execute_packed takes exactly one packed command")
        return await self.execute(*args)

    async def execute_pipeline(self, commands: Sequence[Sequence[Arg]]) -> list[Any]:
        """Send several commands to their slot's master in one write; answer every reply.

        Error replies are answered in place (``ServerError`` values). Commands answered
        with a redirect (or ``TRYAGAIN``/``CLUSTERDOWN``) did not run: those alone are sent
        again, in order, where the slot is served now.

        Raises:
            CrossSlot: the keys span more than one slot (before any I/O).
            ConnectionLost: as :meth:`execute`.
        """
        if not commands:
            return []
        try:
            slot = pipeline_slot(commands)
        except ValueError as exc:
            raise CrossSlot(f"a pipeline goes to one node: {exc}") from None
        replies = await self._run(commands, slot, wait=_WAIT_IN_PIPELINE)
        return [cluster_error(str(r)) if isinstance(r, ReplyError) else r for r in replies]

    def drop(self) -> None:
        """Break every node's socket as if the network failed (for tests and shutdown)."""
        for node in self._nodes.values():
            node.drop()

    async def aclose(self) -> None:
        self._closed = True
        for node in list(self._nodes.values()):
            await node.aclose()
        await trio.lowlevel.checkpoint()

    # -- the layout ---------------------------------------------------------------------

    @property
    def slot_map(self) -> SlotMap | None:
        """The layout as last read (None before the first command)."""
        return self._map

    def node(self, address: Address) -> Connection:
        """The connection to one node (made on first use; no I/O until a command)."""
        conn = self._nodes.get(address)
        if conn is None:
            config = attrs.evolve(
                self.config.for_node(*address),
                connect_timeout=min(self.config.connect_timeout, _NODE_CONNECT_TIMEOUT),
            )
            conn = self._nodes[address] = Connection(config, self._nursery)
        return conn

    async def masters(self) -> list[Address]:
        """Every master serving a slot (reads the layout if there is none yet)."""
        layout = self._map or await self.refresh()
        return list(layout.masters)

    async def every_master(self) -> list[Connection]:
        """One connection per master serving a slot: together they hold every key (a
        ``SCAN`` over the cluster runs on each)."""
        return [self.node(address) for address in await self.masters()]

    async def refresh(self) -> SlotMap:
        """Read the layout again from the first node that answers (one read at a time;
        callers that waited for a read share it).

        Raises:
            NotACluster: a node answered that cluster mode is off.
            ServerError: a node refused (``AUTH`` failed...) and none gave the layout.
            ConnectionLost: no node answered.
        """
        version = self._version
        async with self._refresh_lock:
            if self._version != version and self._map is not None:
                return self._map  # read while we waited
            seeds = list(self._map.nodes) if self._map is not None else []
            seeds += [s for s in self.config.cluster_nodes if s not in seeds]
            seeds.sort(key=lambda a: a in self._suspects)  # failed lately: last
            failures: list[str] = []
            refusals: list[ServerError] = []
            for address in seeds:
                try:
                    layout = await self._read_layout(address)
                except NotACluster:
                    raise
                except (ConnectionLost, ServerError) as exc:
                    failures.append(f"{address[0]}:{address[1]}: {exc}")
                    if (
                        isinstance(exc, ServerError)
                        and not isinstance(exc, ClusterError)
                        and not is_transient(str(exc))
                    ):
                        refusals.append(exc)  # e.g. AUTH refused: an answer, not a fault
                    continue
                self._map = layout
                self._version += 1
                self.layouts += 1
                self._suspects.pop(address, None)
                return layout
            if refusals:  # a node answered no (a wrong password): not worth retrying
                raise refusals[0]
            raise ConnectionLost(
                f"no node of {self.config.display} answered with the cluster layout: "
                + "; ".join(failures)
            )

    async def _read_layout(self, address: Address) -> SlotMap:
        node = self.node(address)
        (reply,) = await node.execute_pipeline([("CLUSTER", "SHARDS")])
        if isinstance(reply, ServerError):
            message = str(reply)
            if "cluster support disabled" in message:
                raise NotACluster(
                    f"{address[0]}:{address[1]} is not in cluster mode (a single server "
                    f"takes a redis:// URL): {message}"
                )
            if "unknown subcommand" not in message.lower():
                raise reply
            (reply,) = await node.execute_pipeline([("CLUSTER", "SLOTS")])
            if isinstance(reply, ServerError):
                raise reply
            shards = parse_slots(reply, address[0])
        else:
            shards = parse_shards(reply, address[0], tls=self.config.tls)
        if not shards:
            raise ClusterError(f"{address[0]}:{address[1]} knows no slots yet")
        return SlotMap(shards)

    def _refresh_soon(self) -> None:
        """Read the layout again in the background (once, however many ask)."""
        if self._refresh_queued or self._closed:
            return
        self._refresh_queued = True

        async def refresh() -> None:
            try:
                await self.refresh()
            except (ConnectionLost, ServerError) as exc:
                log.debug("cluster layout refresh failed: %s", exc)
            finally:
                self._refresh_queued = False

        self._nursery.start_soon(refresh)

    def _suspect(self, address: Address) -> None:
        self._suspects[address] = None
        self._refresh_soon()

    async def _owner(self, slot: int) -> Address:
        layout = self._map or await self.refresh()
        if slot == ANY_MASTER:
            masters = layout.masters
            if not masters:
                raise _Uncovered
            healthy = [m for m in masters if m not in self._suspects]
            return (healthy or masters)[0]
        owner = layout.owners[slot]
        if owner is None:
            raise _Uncovered
        return owner

    # -- sending ------------------------------------------------------------------------

    async def _send(self, address: Address, packed: bytes, expect: int) -> Any:
        """Write ``packed`` to one node; ``_NotSent`` when it cannot be reached."""
        node = self.node(address)
        session = node._session
        if session is None or session.broken is not None or session.idle_closed():
            try:
                session = await node._connect()
            except ConnectionLost as exc:
                raise _NotSent(exc) from exc
        try:
            return await session.request(packed, expect)
        except ConnectionLost:
            self._suspect(address)
            raise

    async def _run(
        self,
        commands: Sequence[Sequence[Arg]],
        slot: int,
        *,
        wait: frozenset[str],
        sent: tuple[Address, list[Any]] | None = None,
    ) -> list[Any]:
        """Send ``commands`` (all of ``slot``) where the slot is served, following
        redirects; answer the raw replies (``ReplyError`` values in place). ``sent``: they
        were sent once already, to that node, with these replies."""
        if self._closed:
            raise ConnectionLost("connection is closed")
        replies: list[Any] = [None] * len(commands)
        todo = list(range(len(commands)))
        ask: Address | None = None
        hops = 0
        backoff = Backoff(0.01, 0.5)
        deadline = trio.current_time() + self.config.connect_timeout
        last_lost: ConnectionLost | None = None
        while True:
            got: list[Any] | None = None
            if sent is not None:
                address, got = sent
                sent = None
            elif ask is not None:
                address = ask
                packed = b"".join(_ASKING + pack_command(tuple(commands[i])) for i in todo)
                expect = 2 * len(todo)
            else:
                try:
                    address = await self._owner(slot)
                except ConnectionLost:  # no layout yet and no node answered: try again
                    delay = backoff.next()
                    if trio.current_time() + delay >= deadline:
                        raise
                    await trio.sleep(delay)
                    continue
                except _Uncovered:
                    delay = backoff.next()
                    if trio.current_time() + delay >= deadline:
                        raise ClusterDown(
                            f"CLUSTERDOWN slot {slot} is served by no master "
                            f"({self.config.display}, after {self.config.connect_timeout} s)"
                        ) from None
                    await trio.sleep(delay)
                    await self._try_refresh()
                    continue
                if len(todo) == 1:
                    packed = pack_command(tuple(commands[todo[0]]))
                else:
                    packed = b"".join(pack_command(tuple(commands[i])) for i in todo)
                expect = len(todo)
            if got is None:
                try:
                    got = await self._send(address, packed, expect)
                except _NotSent as exc:
                    last_lost = exc.lost
                    self._suspects[address] = None
                    ask = None
                    delay = backoff.next()
                    if trio.current_time() + delay >= deadline:
                        raise last_lost from None
                    await trio.sleep(delay)
                    await self._try_refresh()
                    continue
                if expect == 1:
                    got = [got]
                elif ask is not None:
                    got = got[1::2]  # the ASKING replies
            ask = None
            again: list[int] = []
            decision = ""
            for i, reply in zip(todo, got, strict=True):
                replies[i] = reply
                if isinstance(reply, ReplyError):
                    word = first_word(str(reply))
                    if word in ("MOVED", "ASK") or word in wait:
                        again.append(i)
                        decision = decision or str(reply)
            if not again:
                return replies
            todo = again
            word = first_word(decision)
            if word in ("MOVED", "ASK"):
                hops += 1
                redirect = parse_redirect(decision, address[0])
                if redirect is None or hops > _MAX_HOPS:
                    return replies  # the redirect errors are the answer
                self.redirects += 1
                if word == "ASK":
                    ask = redirect.address
                else:
                    if self._map is not None:
                        self._map.move(redirect.slot, redirect.address)
                    self._refresh_soon()
                continue
            delay = backoff.next()
            if trio.current_time() + delay >= deadline:
                return replies
            await trio.sleep(delay)
            if word in ("CLUSTERDOWN", "UNBLOCKED", "MASTERDOWN"):
                await self._try_refresh()

    async def _try_refresh(self) -> None:
        try:
            await self.refresh()
        except ConnectionLost as exc:
            log.debug("cluster layout refresh failed: %s", exc)

    async def _every_master(self, args: Sequence[Arg]) -> Any:
        """Run ``args`` on every master (script and function loading); answer the first
        reply. An error from any raises."""
        first: Any = None
        for i, address in enumerate(await self.masters()):
            reply = await self.node(address).execute(*args)
            if i == 0:
                first = reply
        return first


@asynccontextmanager
async def open_cluster(config: ConnectionConfig) -> AsyncIterator[ClusterConnection]:
    """A connection to the Redis Cluster ``config`` names (``echomq.connect`` picks it for
    a ``redis+cluster://`` URL); no I/O happens until the first command."""
    async with open_service_nursery() as nursery:
        conn = ClusterConnection(config, nursery)
        try:
            yield conn
        finally:
            await conn.aclose()
