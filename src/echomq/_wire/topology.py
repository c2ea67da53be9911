"""A cluster's layout: which master serves which slot. Plain functions, no I/O.

Rule 1: the layout is read from ``CLUSTER SHARDS`` (Redis 7+); a server that does not
know it answers an error, and ``CLUSTER SLOTS`` is read instead. Both give, per shard, its
slot ranges, its master and its replicas.
Rule 2: a node is addressed by its ``endpoint`` (what ``cluster-preferred-endpoint-type``
announces); an unknown endpoint (``?`` or empty) means "the address you asked", so it is
replaced by the host of the node that answered.
Rule 3: a master marked ``fail`` does not own its slots (they are uncovered until a
replica takes over).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import attrs

from .hashslots import SLOTS

__all__ = [
    "Address",
    "Redirect",
    "Shard",
    "SlotMap",
    "parse_redirect",
    "parse_shards",
    "parse_slots",
]

Address = tuple[str, int]


@attrs.frozen
class Shard:
    """One master, its replicas and the slot ranges (inclusive) it serves."""

    master: Address
    ranges: tuple[tuple[int, int], ...]
    replicas: tuple[Address, ...] = ()
    master_id: str = ""


@attrs.frozen
class Redirect:
    """A ``MOVED`` or ``ASK`` reply: the slot and where it is served now."""

    kind: str  # "MOVED" | "ASK"
    slot: int
    address: Address


def _text(value: Any) -> str:
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return str(value)


def _host(value: Any, fallback: str) -> str:
    host = _text(value) if value is not None else ""
    return fallback if host in ("", "?") else host


def _pairs(flat: Sequence[Any]) -> dict[str, Any]:
    return {_text(flat[i]): flat[i + 1] for i in range(0, len(flat) - 1, 2)}


def parse_shards(reply: Sequence[Any], asked: str, *, tls: bool = False) -> list[Shard]:
    """Shards from a ``CLUSTER SHARDS`` reply (RESP2: flat key/value arrays).

    ``asked`` is the host of the node that answered (for an unknown endpoint); with
    ``tls`` a node's ``tls-port`` is its address.
    """
    shards: list[Shard] = []
    for entry in reply:
        fields = _pairs(entry)
        flat = [int(x) for x in fields.get("slots", [])]
        ranges = tuple((flat[i], flat[i + 1]) for i in range(0, len(flat) - 1, 2))
        master: Address | None = None
        master_id = ""
        replicas: list[Address] = []
        for node in fields.get("nodes", []):
            info = _pairs(node)
            port_field = "tls-port" if tls and "tls-port" in info else "port"
            if port_field not in info:
                continue
            address = (_host(info.get("endpoint", info.get("ip")), asked), int(info[port_field]))
            health = _text(info.get("health", "online"))
            if _text(info.get("role", "")) == "master":
                if health != "fail":
                    master, master_id = address, _text(info.get("id", ""))
            elif health == "online":
                replicas.append(address)
        if master is not None and ranges:
            shards.append(Shard(master, ranges, tuple(replicas), master_id))
    return shards


def parse_slots(reply: Sequence[Any], asked: str) -> list[Shard]:
    """Shards from a ``CLUSTER SLOTS`` reply: ``[[start, end, [host, port, id], ...]]``."""
    by_master: dict[Address, tuple[list[tuple[int, int]], list[Address], str]] = {}
    for entry in reply:
        start, end, master_info, *replica_infos = entry
        master = (_host(master_info[0], asked), int(master_info[1]))
        node_id = _text(master_info[2]) if len(master_info) > 2 else ""
        ranges, replicas, _ = by_master.setdefault(master, ([], [], node_id))
        ranges.append((int(start), int(end)))
        for info in replica_infos:
            replica = (_host(info[0], asked), int(info[1]))
            if replica not in replicas:
                replicas.append(replica)
    return [
        Shard(master, tuple(sorted(ranges)), tuple(replicas), node_id)
        for master, (ranges, replicas, node_id) in by_master.items()
    ]


def parse_redirect(message: str, asked: str) -> Redirect | None:
    """``MOVED 3999 127.0.0.1:6381`` (or ``ASK ...``) as a :class:`Redirect`; else None.

    An empty host (``MOVED 3999 :6381``) means the host of the node that answered.
    """
    parts = message.split(" ")
    if len(parts) < 3 or parts[0] not in ("MOVED", "ASK"):
        return None
    host, sep, port = parts[2].rpartition(":")
    if not sep or not port.isdigit() or not parts[1].isdigit():
        return None
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    return Redirect(parts[0], int(parts[1]), (host or asked, int(port)))


class SlotMap:
    """Which master serves each slot (``None``: not covered), and every known node."""

    def __init__(self, shards: Iterable[Shard] = ()) -> None:
        self.owners: list[Address | None] = [None] * SLOTS
        self.shards = list(shards)
        for shard in self.shards:
            for start, end in shard.ranges:
                start, end = max(start, 0), min(end, SLOTS - 1)
                self.owners[start : end + 1] = [shard.master] * (end - start + 1)
        self._masters: list[Address] | None = None

    @property
    def masters(self) -> list[Address]:
        """Every master that serves a slot, in order of its lowest slot."""
        if self._masters is None:
            self._masters = list(dict.fromkeys(o for o in self.owners if o is not None))
        return self._masters

    @property
    def nodes(self) -> list[Address]:
        """Masters first, then replicas: the nodes worth asking for the layout."""
        found = dict.fromkeys(self.masters)
        for shard in self.shards:
            found.update(dict.fromkeys(shard.replicas))
        return list(found)

    @property
    def covered(self) -> bool:
        return all(owner is not None for owner in self.owners)

    def move(self, slot: int, address: Address) -> None:
        """Record a ``MOVED``: the slot is served by ``address`` now."""
        self.owners[slot] = address
        self._masters = None
