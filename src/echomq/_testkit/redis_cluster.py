"""A private Redis Cluster: cluster-enabled ``redis-server`` children on free loopback ports.

``RedisCluster(masters=3, replicas=0)`` starts ``masters * (1 + replicas)`` servers
(``--cluster-enabled yes``, persistence off as for the single server), gives each master a
distinct config epoch and an equal share of the 16384 slots (``CLUSTER ADDSLOTSRANGE``),
joins them (``CLUSTER MEET``), attaches replicas (``CLUSTER REPLICATE``), and returns once
every node reports ``cluster_state:ok``, agrees on who serves each slot, and every replica
is in sync. ``url`` is a ``redis+cluster://`` URL naming every node.

Fault helpers for tests (each returns once the cluster agrees again):
- ``kill(node)`` / ``restart(node)``: SIGKILL; start again on the same port and directory
  (the node keeps its id from ``nodes.conf`` and rejoins; its data is gone).
- ``failover(master)``: ``CLUSTER FAILOVER`` on one of its replicas (a coordinated
  hand-over: the master stops writes until the replica has caught up).
- ``migrate_slot(slot, to)``: ``SETSLOT IMPORTING``/``MIGRATING``, ``MIGRATE ... KEYS``
  (all the slot's keys in one call), ``SETSLOT NODE``; ``start_migration`` returns a
  :class:`SlotMigration` to stop half-way (the ``ASK`` window).

Admin commands go over short blocking sockets of their own (hiredis), never through the
trio wire under test.
"""

from __future__ import annotations

import socket
import time
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from types import TracebackType
from typing import Any

import attrs
import hiredis
import trio

from .redis_server import RedisServer, RedisServerError, free_port

__all__ = ["ClusterNode", "RedisCluster", "SlotMigration", "open_redis_cluster"]

SLOTS = 16384  # a Redis Cluster's hash slots


def pack(args: tuple[Any, ...]) -> bytes:
    """One command as RESP bytes (this module speaks to its nodes on plain sockets; it
    imports nothing of the wire, docs/design.md)."""
    return bytes(hiredis.pack_command(tuple(args)))


class _ReplyError(Exception):
    pass


def _text(value: Any) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


@attrs.define(eq=False)
class ClusterNode:
    """One node of a :class:`RedisCluster`: its server process and its cluster id."""

    server: RedisServer
    bus_port: int
    node_id: str = ""
    password: str | None = None

    @property
    def port(self) -> int:
        return self.server.port

    @property
    def address(self) -> tuple[str, int]:
        return ("127.0.0.1", self.server.port)

    @property
    def running(self) -> bool:
        process = self.server.process
        return process is not None and process.poll() is None

    def execute(self, *args: str | bytes | int, timeout: float = 10.0) -> Any:
        """Run one command on this node over a fresh blocking socket; errors raise."""
        with socket.create_connection(("127.0.0.1", self.port), timeout=timeout) as sock:
            reader = hiredis.Reader(replyError=_ReplyError)
            packed = b""
            if self.password:
                packed += pack(("AUTH", self.password))
            packed += pack(args)
            sock.sendall(packed)
            replies: list[Any] = []
            want = 2 if self.password else 1
            while len(replies) < want:
                while (reply := reader.gets()) is not False:
                    replies.append(reply)
                if len(replies) >= want:
                    break
                data = sock.recv(1 << 16)
                if not data:
                    raise OSError(f"node {self.port} closed the connection")
                reader.feed(data)
        reply = replies[-1]
        if isinstance(reply, _ReplyError):
            raise RedisServerError(f"node {self.port}: {' '.join(map(_text, args[:2]))}: {reply}")
        return reply

    def info(self, section: str) -> dict[str, str]:
        """``CLUSTER INFO`` (section ``cluster``) or an ``INFO`` section, as a dict."""
        raw = (
            self.execute("CLUSTER", "INFO")
            if section == "cluster"
            else self.execute("INFO", section)
        )
        text = _text(raw)
        found: dict[str, str] = {}
        for line in text.splitlines():
            key, sep, value = line.partition(":")
            if sep:
                found[key.strip()] = value.strip()
        return found

    def role(self) -> str:
        """``master`` or ``slave``, as the node itself says (``ROLE``)."""
        return _text(self.execute("ROLE")[0])

    def __repr__(self) -> str:
        return f"<ClusterNode 127.0.0.1:{self.port} {self.node_id[:8]}>"


@attrs.define(eq=False)
class SlotMigration:
    """A slot on its way from ``source`` to ``target`` (see :meth:`RedisCluster.start_migration`).

    Between :meth:`RedisCluster.start_migration` and :meth:`finish` the source answers
    ``ASK`` for keys it no longer holds, and ``TRYAGAIN`` for a command whose keys are split.
    """

    cluster: RedisCluster
    slot: int
    source: ClusterNode
    target: ClusterNode

    def keys(self) -> list[bytes]:
        """The slot's keys still on the source."""
        keys: list[bytes] = self.source.execute("CLUSTER", "GETKEYSINSLOT", self.slot, 100_000)
        return keys

    def move_keys(self, keys: Sequence[bytes | str] | None = None) -> int:
        """Move ``keys`` (default: every key of the slot, in one MIGRATE); answer how many."""
        moved = 0
        while True:
            batch = list(keys) if keys is not None else self.keys()
            if not batch:
                return moved
            auth: list[str] = ["AUTH", self.cluster.password] if self.cluster.password else []
            self.source.execute(
                "MIGRATE", "127.0.0.1", self.target.port, "", 0, 10_000, *auth, "KEYS", *batch
            )
            moved += len(batch)
            if keys is not None:
                return moved

    def finish(self) -> None:
        """Move what remains, give the slot to the target on every master, wait for agreement."""
        self.move_keys()
        # target first (redis-cli's order): it must own the slot before the source lets go
        order = [self.target, self.source] + [
            n for n in self.cluster.masters() if n not in (self.target, self.source)
        ]
        for node in order:
            node.execute("CLUSTER", "SETSLOT", self.slot, "NODE", self.target.node_id)
        self.cluster.wait_stable()


@attrs.define(eq=False)
class RedisCluster:
    """A private Redis Cluster. ``start()``/``stop()``, or use it as a context manager.

    ``node_timeout_ms`` is ``cluster-node-timeout``: how long a silent master has before
    its replica takes over (small, so fault tests are quick).
    """

    masters_count: int = attrs.field(default=3, alias="masters")
    replicas: int = 0
    password: str | None = None
    node_timeout_ms: int = 1000
    extra_args: Sequence[str] = ()
    startup_timeout: float = 30.0
    nodes: list[ClusterNode] = attrs.field(factory=list, init=False)

    @property
    def url(self) -> str:
        """``redis+cluster://127.0.0.1:p1,127.0.0.1:p2,.../`` naming every node."""
        auth = f":{self.password}@" if self.password else ""
        hosts = ",".join(f"127.0.0.1:{node.port}" for node in self.nodes)
        return f"redis+cluster://{auth}{hosts}/"

    # -- lifecycle -----------------------------------------------------------------------

    def start(self) -> RedisCluster:
        """Start every node, assign the slots, join, attach replicas, wait until stable.

        Raises:
            RedisServerError: a server did not start, or the cluster did not become stable
                within ``startup_timeout``.
        """
        if self.nodes:
            raise RedisServerError("already started")
        if self.masters_count < 1 or self.replicas < 0:
            raise RedisServerError("a cluster needs at least one master")
        try:
            for _ in range(self.masters_count * (1 + self.replicas)):
                # the bus port is chosen too: the default (port + 10000) overflows
                bus = free_port()
                server = RedisServer(password=self.password, extra_args=self._node_args(bus))
                self.nodes.append(ClusterNode(server.start(), bus, password=self.password))
            for node in self.nodes:
                node.node_id = _text(node.execute("CLUSTER", "MYID"))
            masters = self.nodes[: self.masters_count]
            share = SLOTS // len(masters)
            for i, node in enumerate(masters):
                node.execute("CLUSTER", "SET-CONFIG-EPOCH", i + 1)
                last = SLOTS - 1 if i == len(masters) - 1 else (i + 1) * share - 1
                node.execute("CLUSTER", "ADDSLOTSRANGE", i * share, last)
            first = self.nodes[0]
            for node in self.nodes[1:]:
                node.execute("CLUSTER", "MEET", "127.0.0.1", first.port, first.bus_port)
            self._wait("every node to know every other", self._all_known)
            for i, node in enumerate(self.nodes[self.masters_count :]):
                master = masters[i % self.masters_count]
                node.execute("CLUSTER", "REPLICATE", master.node_id)
            self.wait_stable(self.startup_timeout)
        except BaseException:
            self.stop()
            raise
        return self

    def _node_args(self, bus_port: int) -> list[str]:
        return [
            "--cluster-enabled", "yes",
            "--cluster-port", str(bus_port),
            "--cluster-config-file", "nodes.conf",
            "--cluster-node-timeout", str(self.node_timeout_ms),
            "--cluster-replica-validity-factor", "0",  # any replica may take over
            "--repl-diskless-sync-delay", "0",  # replicas sync at once (default: wait 5 s)
            *self.extra_args,
        ]  # fmt: skip

    def stop(self) -> None:
        """Stop every node and remove their directories."""
        for node in self.nodes:
            node.server.stop()
        self.nodes.clear()

    def __enter__(self) -> RedisCluster:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    # -- reading the layout --------------------------------------------------------------

    def running(self) -> list[ClusterNode]:
        return [node for node in self.nodes if node.running]

    def node(self, port_or_id: int | str) -> ClusterNode:
        for node in self.nodes:
            if node.port == port_or_id or node.node_id == port_or_id:
                return node
        raise KeyError(port_or_id)

    def _slot_owners(self, node: ClusterNode) -> list[tuple[int, int, int]]:
        """(start, end, master port) for every range, as ``node`` sees them."""
        return sorted(
            (int(s), int(e), int(m[1])) for s, e, m, *_ in node.execute("CLUSTER", "SLOTS")
        )

    def masters(self) -> list[ClusterNode]:
        """The running masters, in slot order (as the first running node sees them)."""
        ports = dict.fromkeys(port for _, _, port in self._slot_owners(self.running()[0]))
        return [self.node(port) for port in ports]

    def replicas_of(self, master: ClusterNode) -> list[ClusterNode]:
        """The running replicas that follow ``master``."""
        found = []
        for node in self.running():
            if node is master:
                continue
            info = node.info("replication")
            if info.get("role") == "slave" and info.get("master_port") == str(master.port):
                found.append(node)
        return found

    def slot_of(self, key: str | bytes) -> int:
        """The slot of ``key`` (a queue's keys all map to the slot of ``"{" + q + "}"``),
        as a master computes it (``CLUSTER KEYSLOT``)."""
        return int(self.masters()[0].execute("CLUSTER", "KEYSLOT", key))

    def owner(self, slot: int) -> ClusterNode:
        """The master serving ``slot`` now."""
        for start, end, port in self._slot_owners(self.running()[0]):
            if start <= slot <= end:
                return self.node(port)
        raise KeyError(slot)

    # -- waiting -------------------------------------------------------------------------

    def _wait(self, what: str, done: Callable[[], bool], timeout: float | None = None) -> None:
        deadline = time.monotonic() + (timeout if timeout is not None else self.startup_timeout)
        while True:
            try:
                if done():
                    return
            except (OSError, RedisServerError):
                pass  # a node restarting, or refusing while it changes role
            if time.monotonic() > deadline:
                raise RedisServerError(f"cluster: timed out waiting for {what}")
            time.sleep(0.02)

    def _all_known(self) -> bool:
        count = str(len(self.running()))
        return all(n.info("cluster").get("cluster_known_nodes") == count for n in self.running())

    def _stable(self) -> bool:
        running = self.running()
        views = set()
        for node in running:
            info = node.info("cluster")
            if info.get("cluster_state") != "ok" or info.get("cluster_slots_assigned") != str(
                SLOTS
            ):
                return False
            views.add(tuple(self._slot_owners(node)))
        if len(views) != 1:
            return False
        masters = {port for _, _, port in next(iter(views))}
        for node in running:
            replication = node.info("replication")
            if node.port in masters:
                if replication.get("role") != "master":
                    return False
            elif replication.get("master_link_status") != "up":
                return False
        return True

    def wait_stable(self, timeout: float | None = None) -> None:
        """Wait until every running node says ``cluster_state:ok``, all agree on who serves
        each slot, and every replica's link to its master is up."""
        self._wait("a stable cluster", self._stable, timeout)

    # -- faults --------------------------------------------------------------------------

    def kill(self, node: ClusterNode) -> None:
        """SIGKILL ``node``; returns at once (its replica takes over after the node timeout)."""
        node.server.kill()

    def restart(self, node: ClusterNode) -> None:
        """Start ``node`` again on the same port (same id); wait until the cluster is stable."""
        node.server.restart()
        self.wait_stable()

    def wait_for_owner(self, slot: int, owner: ClusterNode, timeout: float | None = None) -> None:
        """Wait until every running node says ``owner`` serves ``slot`` and all is stable."""

        def done() -> bool:
            return (
                all(
                    any(s <= slot <= e and p == owner.port for s, e, p in self._slot_owners(n))
                    for n in self.running()
                )
                and self._stable()
            )

        self._wait(f"slot {slot} on {owner}", done, timeout)

    def failover(self, master: ClusterNode, *, force: bool = False) -> ClusterNode:
        """``CLUSTER FAILOVER`` on a replica of ``master``; answer the new master once the
        cluster agrees (``force``: without the old master's agreement, e.g. it is dead)."""
        candidates = self.replicas_of(master)
        if not candidates:
            raise RedisServerError(f"{master} has no replica to fail over to")
        replica = candidates[0]
        replica.execute("CLUSTER", "FAILOVER", *(["FORCE"] if force else []))
        self._wait(f"{replica} to become master", lambda: replica.role() == "master")
        self.wait_stable()
        return replica

    def start_migration(self, slot: int, to: ClusterNode) -> SlotMigration:
        """Open ``slot`` for migration to ``to`` (IMPORTING there, MIGRATING at the source);
        keys move with :meth:`SlotMigration.move_keys`, the slot with ``finish``."""
        source = self.owner(slot)
        if source is to:
            raise RedisServerError(f"slot {slot} is already on {to}")
        to.execute("CLUSTER", "SETSLOT", slot, "IMPORTING", source.node_id)
        source.execute("CLUSTER", "SETSLOT", slot, "MIGRATING", to.node_id)
        return SlotMigration(self, slot, source, to)

    def migrate_slot(self, slot: int, to: ClusterNode) -> None:
        """Move ``slot`` and every key in it to the master ``to``; wait until all agree."""
        self.start_migration(slot, to).finish()


@asynccontextmanager
async def open_redis_cluster(
    *,
    masters: int = 3,
    replicas: int = 0,
    password: str | None = None,
    node_timeout_ms: int = 1000,
    extra_args: Sequence[str] = (),
) -> AsyncIterator[RedisCluster]:
    """Start a private Redis Cluster for the duration of an ``async with`` block."""
    cluster = RedisCluster(
        masters=masters,
        replicas=replicas,
        password=password,
        node_timeout_ms=node_timeout_ms,
        extra_args=extra_args,
    )
    await trio.to_thread.run_sync(cluster.start)
    try:
        yield cluster
    finally:
        with trio.CancelScope(shield=True):
            await trio.to_thread.run_sync(cluster.stop)
