"""Redis Cluster hash slots, and where a command goes: plain functions, no I/O.

Rule 1: a key's slot is CRC16 (XMODEM) of the key, modulo 16384; when the key has a
non-empty ``{hash tag}`` (the first ``{`` and the first ``}`` after it), only the tag is
hashed. Every echomq key carries its queue's tag (``emq:{q}:...``), so a queue is one slot.
Rule 2: a command goes to the slot of its first key: the second word for most commands,
the first key after ``numkeys`` for ``EVAL``/``EVALSHA``/``FCALL``, the key after
``STREAMS`` for ``XREAD``. A ``SCAN`` whose ``MATCH`` pattern holds a literal hash tag
goes to that tag's slot (the node that holds those keys). Keyless commands (``PING``,
``TIME``, ``INFO``...) go to any master; :data:`ALL_MASTERS` commands (``SCRIPT LOAD``,
``FUNCTION LOAD``, ``FLUSHALL``...) go to every master.
"""

from __future__ import annotations

from collections.abc import Sequence

__all__ = [
    "ALL_MASTERS",
    "ANY_MASTER",
    "SLOTS",
    "command_slot",
    "crc16",
    "key_slot",
    "pipeline_slot",
]

SLOTS = 16384
ANY_MASTER = -1  # command_slot: keyless, any master will do
ALL_MASTERS = -2  # command_slot: send to every master (script and function loading...)

Arg = str | bytes | int | float


def _make_table() -> tuple[int, ...]:
    table = []
    for byte in range(256):
        crc = byte << 8
        for _ in range(8):
            crc = ((crc << 1) ^ 0x1021) if crc & 0x8000 else crc << 1
            crc &= 0xFFFF
        table.append(crc)
    return tuple(table)


_TABLE = _make_table()


def crc16(data: bytes) -> int:
    """CRC16-CCITT (XMODEM), the checksum Redis Cluster hashes keys with."""
    crc = 0
    table = _TABLE
    for byte in data:
        crc = ((crc << 8) & 0xFFFF) ^ table[(crc >> 8) ^ byte]
    return crc


def _hashed_part(raw: bytes) -> bytes:
    start = raw.find(b"{")
    if start >= 0:
        end = raw.find(b"}", start + 1)
        if end > start + 1:
            return raw[start + 1 : end]
    return raw


_CACHE: dict[Arg, int] = {}
_CACHE_MAX = 1 << 16


def key_slot(key: Arg) -> int:
    """The cluster slot (0..16383) of ``key`` (a str is hashed as its UTF-8 bytes)."""
    if isinstance(key, str):
        # The common case: an echomq key. Cache by its tag, not the key (job ids vary).
        start = key.find("{")
        if start >= 0:
            end = key.find("}", start + 1)
            if end > start + 1:
                tag = key[start + 1 : end]
                slot = _CACHE.get(tag)
                if slot is None:
                    if len(_CACHE) >= _CACHE_MAX:
                        _CACHE.clear()
                    slot = _CACHE[tag] = crc16(tag.encode()) & (SLOTS - 1)
                return slot
        raw = key.encode()
    elif isinstance(key, bytes | bytearray | memoryview):
        raw = bytes(key)
    else:
        raw = str(key).encode()
    return crc16(_hashed_part(raw)) & (SLOTS - 1)


def _word(arg: Arg) -> str:
    if isinstance(arg, bytes | bytearray | memoryview):
        return bytes(arg).decode("ascii", "replace").upper()
    return str(arg).upper()


# How to find a command's first key (default: the word after the command name).
_KEYLESS = frozenset(
    {
        "ACL", "AUTH", "BGREWRITEAOF", "BGSAVE", "CLIENT", "CLUSTER", "COMMAND", "CONFIG",
        "DBSIZE", "DEBUG", "ECHO", "FAILOVER", "HELLO", "INFO", "KEYS", "LASTSAVE",
        "LATENCY", "LOLWUT", "MODULE", "MONITOR", "PING", "PUBLISH", "PUBSUB", "QUIT",
        "RANDOMKEY", "READONLY", "READWRITE", "ROLE", "SAVE", "SCAN", "SCRIPT", "SELECT",
        "SHUTDOWN", "SLOWLOG", "SWAPDB", "TIME", "WAIT", "FUNCTION", "MEMORY",
    }
)  # fmt: skip
_NUMKEYS_AT_2 = frozenset(
    {"EVAL", "EVALSHA", "EVAL_RO", "EVALSHA_RO", "FCALL", "FCALL_RO", "ZUNION", "ZINTER",
     "ZDIFF", "SINTERCARD", "ZINTERCARD", "LMPOP", "ZMPOP"}
)  # fmt: skip
_KEY_AT_2 = frozenset({"OBJECT", "XINFO", "XGROUP"})
_EVERY_MASTER = frozenset(
    {("SCRIPT", "LOAD"), ("SCRIPT", "FLUSH"), ("FUNCTION", "LOAD"), ("FUNCTION", "FLUSH"),
     ("FUNCTION", "DELETE"), ("FUNCTION", "RESTORE")}
)  # fmt: skip
_EVERY_MASTER_ALONE = frozenset({"FLUSHALL", "FLUSHDB"})
_GLOB = frozenset("*?[]\\")


def _scan_slot(args: Sequence[Arg]) -> int:
    """SCAN ... MATCH emq:{q}:* goes to q's slot; any other SCAN to any master."""
    for i in range(2, len(args) - 1):
        if _word(args[i]) == "MATCH":
            pattern = args[i + 1]
            text = (
                pattern.decode("utf-8", "replace") if isinstance(pattern, bytes) else str(pattern)
            )
            start = text.find("{")
            end = text.find("}", start + 1) if start >= 0 else -1
            if start >= 0 and end > start + 1:
                tag = text[start + 1 : end]
                if not _GLOB.intersection(text[: end + 1]):
                    return key_slot("{" + tag + "}")
            return ANY_MASTER
    return ANY_MASTER


def command_slot(args: Sequence[Arg]) -> int:
    """The slot ``args`` must be sent to, or :data:`ANY_MASTER` / :data:`ALL_MASTERS`."""
    name = args[0]
    word = name if isinstance(name, str) and name.isupper() else _word(name)
    if word in _NUMKEYS_AT_2:
        if len(args) > 3 and int(args[2]) > 0:
            return key_slot(args[3])
        return ANY_MASTER
    if word in _KEYLESS:
        if word == "SCAN":
            return _scan_slot(args)
        if (word == "SCRIPT" or word == "FUNCTION") and len(args) > 1:
            if (word, _word(args[1])) in _EVERY_MASTER:
                return ALL_MASTERS
        if word == "MEMORY" and len(args) > 2 and _word(args[1]) == "USAGE":
            return key_slot(args[2])
        return ANY_MASTER
    if word in _EVERY_MASTER_ALONE:
        return ALL_MASTERS
    if word in _KEY_AT_2:
        return key_slot(args[2]) if len(args) > 2 else ANY_MASTER
    if word == "XREAD" or word == "XREADGROUP":
        for i in range(1, len(args) - 1):
            if _word(args[i]) == "STREAMS":
                return key_slot(args[i + 1])
        return ANY_MASTER
    if len(args) > 1:
        return key_slot(args[1])
    return ANY_MASTER


def pipeline_slot(commands: Sequence[Sequence[Arg]]) -> int:
    """The one slot every keyed command of a pipeline maps to (:data:`ANY_MASTER` when
    none has a key).

    Raises:
        ValueError: two commands map to different slots, or one must go to every master
            (the caller turns this into :class:`~echomq.errors.CrossSlot`).
    """
    found = ANY_MASTER
    for command in commands:
        slot = command_slot(command)
        if slot == ANY_MASTER:
            continue
        if slot == ALL_MASTERS:
            raise ValueError(f"{_word(command[0])} goes to every master: not in a pipeline")
        if found == ANY_MASTER:
            found = slot
        elif slot != found:
            raise ValueError(f"commands map to slots {found} and {slot}")
    return found
