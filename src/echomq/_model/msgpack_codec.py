"""The msgpack codec (``Queue(name, codec="msgpack")``), on the optional ``msgpack`` package.

Rule 1: the same payload shape as JSON's (a map ``{"task", "args", "kwargs"}``) and the
same types (``_model/tags.py``): bytes are msgpack's own bin type; every other tagged
value is a two-item array ``[<tag>, value]`` whose first item is extension type
:data:`~echomq._model.tags.EXT` holding the tag's name, so a msgpack map has no reserved
key, and no user value can be taken for a tag. The array is written by the same packer
(no nested encoding) and read back by the unpacker's ``list_hook``. A msgpack timestamp
(extension -1, as other languages write it) decodes as an aware UTC datetime; another
extension type comes back as ``msgpack.ExtType``.
Rule 2: types are strict (``strict_types``): an int or str subclass that is an enum is
tagged as an enum, a tuple is written as a list (as in JSON). Integers are msgpack's
(64 bits): a larger one is refused before any I/O.
Rule 3: a msgpack call starts with a map's marker byte, never ``{``: a JSON payload given
to this codec is a :class:`~echomq.errors.CodecMismatch` (``_model/codec.py`` rule 3).
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from typing import Any

from ..errors import CodecMismatch, InvalidArgument, SerializationError
from .codec import MSGPACK_LEADS, Call, argument_error
from .tags import EXT, KEY, reduce, untag

__all__ = ["MsgpackCodec", "msgpack_codec"]

try:
    import msgpack
except ImportError:  # the optional extra: Queue(codec="msgpack") says how to get it
    msgpack = None


class _Tag:
    """The extension item that starts a tagged array (its tag's name)."""

    __slots__ = ("name",)

    def __init__(self, name: str) -> None:
        self.name = name


class MsgpackCodec:
    """Payloads and results as msgpack (``pip install echomq[msgpack]``)."""

    name = "msgpack"

    def __init__(self) -> None:
        if msgpack is None:
            raise InvalidArgument(
                "codec 'msgpack' needs the msgpack package: pip install 'echomq[msgpack]'"
            )
        self._ext_type = msgpack.ExtType
        self._heads: dict[str, Any] = {}  # tag -> its extension item
        self._tags: dict[bytes, _Tag] = {}  # an extension's data -> its _Tag

    def _default(self, value: Any) -> Any:
        tag, carried = reduce(value, bin_native=True)
        if tag is None:
            return carried
        head = self._heads.get(tag)
        if head is None:
            head = self._heads[tag] = self._ext_type(EXT, tag.encode())
        return [head, carried]

    def _pack(self, value: Any) -> bytes:
        """``value`` as msgpack (raises TypeError, ValueError, OverflowError...)."""
        packed: bytes = msgpack.packb(
            value, default=self._default, use_bin_type=True, strict_types=True
        )
        return packed

    def _ext(self, code: int, data: bytes) -> Any:
        if code != EXT:
            return self._ext_type(code, data)
        tag = self._tags.get(data)
        if tag is None:
            try:
                tag = _Tag(data.decode())
            except UnicodeDecodeError:
                raise SerializationError(f"msgpack extension {EXT} is not a tag name") from None
            if len(self._tags) < 256:
                self._tags[data] = tag
        return tag

    @staticmethod
    def _list(items: list[Any]) -> Any:
        if not items or type(items[0]) is not _Tag:
            return items
        if len(items) != 2:
            raise SerializationError(f"a tagged msgpack array has {len(items)} items, not 2")
        return untag(items[0].name, items[1])

    def _unpack(self, data: bytes) -> Any:
        return msgpack.unpackb(
            data,
            ext_hook=self._ext,
            list_hook=self._list,
            raw=False,
            strict_map_key=False,
            timestamp=3,
        )

    def _encode(self, value: Any, what: str) -> bytes:
        try:
            return self._pack(value)
        except RecursionError:
            raise SerializationError(
                f"{what} cannot be encoded as msgpack: nested too deeply"
            ) from None
        except (TypeError, ValueError, OverflowError) as exc:
            raise SerializationError(f"{what} cannot be encoded as msgpack: {exc}") from None

    def _decode(self, data: bytes, what: str) -> Any:
        try:
            return self._unpack(data)
        except SerializationError:
            raise
        except RecursionError:
            raise SerializationError(f"{what} is not msgpack: nested too deeply") from None
        except Exception as exc:  # msgpack's ExtraData, FormatError, StackError, ValueError...
            raise SerializationError(f"{what} is not msgpack: {exc}") from None

    def encode_call(self, task: str, args: Sequence[Any], kwargs: Mapping[str, Any]) -> bytes:
        if not isinstance(task, str) or not task:
            raise SerializationError("task name must be a non-empty str")
        call = {"task": task, "args": list(args), "kwargs": dict(kwargs)}
        try:
            return self._encode(call, "arguments")
        except SerializationError as exc:
            named = argument_error(self._pack, args, kwargs, self.name)
            if named is None:
                raise
            raise named from exc.__cause__

    def decode_call(self, payload: bytes) -> Call:
        if payload[:1] == b"{":
            raise CodecMismatch(self.name, "json")
        data = self._decode(payload, "payload")
        if not isinstance(data, dict) or not (payload[:1] and payload[0] in MSGPACK_LEADS):
            raise SerializationError("payload is not an echomq call: not a map")
        task, args, kwargs = data.get("task"), data.get("args", []), data.get("kwargs", {})
        if not isinstance(task, str) or not isinstance(args, list) or not isinstance(kwargs, dict):
            raise SerializationError("payload is not an echomq call: bad field types")
        return Call(task=task, args=tuple(args), kwargs=kwargs)

    def peek_call(self, payload: bytes) -> Call:
        """The call as stored, tagged values as ``{"__emq__": tag, "v": value}`` objects,
        no class looked up (``codec.peek_call``: display)."""

        def ext(code: int, data: bytes) -> Any:
            if code != EXT:
                return {KEY: f"ext{code}", "v": data.hex()}
            return _Tag(data.decode(errors="replace"))

        def shown(items: list[Any]) -> Any:
            if len(items) == 2 and type(items[0]) is _Tag:
                return {KEY: items[0].name, "v": items[1]}
            return items

        try:
            data = msgpack.unpackb(
                payload,
                ext_hook=ext,
                list_hook=shown,
                raw=False,
                strict_map_key=False,
                timestamp=3,
            )
        except Exception as exc:
            raise SerializationError(f"payload is not msgpack: {exc}") from None
        if not isinstance(data, dict) or not isinstance(data.get("task"), str):
            raise SerializationError("payload is not an echomq call: not a map")
        args, kwargs = data.get("args", []), data.get("kwargs", {})
        if not isinstance(args, list) or not isinstance(kwargs, dict):
            raise SerializationError("payload is not an echomq call: bad field types")
        return Call(task=data["task"], args=tuple(args), kwargs=kwargs)

    def encode_result(self, value: Any) -> bytes:
        return self._encode(value, "result")

    def decode_result(self, data: bytes) -> Any:
        return self._decode(data, "result")


@functools.cache
def msgpack_codec() -> MsgpackCodec:
    """The one msgpack codec (it holds no state).

    Raises:
        InvalidArgument: the msgpack package is not installed.
    """
    return MsgpackCodec()
