"""Payload and result encoding: JSON by default, msgpack per queue; pickle never.

A job's payload names the task and carries its arguments::

    {"task": "app.send", "args": [...], "kwargs": {...}}

Rule 1 (types): besides JSON's own, the codecs carry datetime, date, time, timedelta,
UUID, Decimal, bytes, sets, enums, dataclasses and attrs classes as tagged values, and
pydantic models as their JSON dump (``_model/tags.py`` has the table, the tag format and
the rules that keep decoding safe). Plain JSON from another language is read exactly as
``json.loads`` reads it: only the reserved key ``__emq__`` marks a tag. A call whose
arguments hold a tag says so in its envelope (``"tagged": true``, after ``kwargs``), so a
worker decodes a plain call with the scanner alone and only a tagged one looks for tags
(another language's producer that writes tags sets the key too).
Rule 2 (before any I/O): encoding happens before any I/O, so an argument that cannot be
encoded raises :class:`~echomq.errors.UnencodableArgument` (a ``SerializationError``)
naming the argument and the type, and nothing is sent. Every way a value or a payload
can be refused is a ``SerializationError``, including JSON nested too deeply for
Python's recursive codec (a ``RecursionError`` never leaves this module): valid JSON
from another producer may nest deeper than a Python process can follow.
Rule 3 (one codec per queue): producers and workers of a queue use the codec of their
``Queue`` object (``Queue(name, codec="msgpack")``). The two codecs' payloads cannot be
taken for each other (a JSON call is text starting with ``{``, a msgpack call starts
with a map's marker byte, never the first byte of JSON text), so a worker given the
other codec's payload fails that job with :class:`~echomq.errors.CodecMismatch`, naming
both, and goes on.
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Callable, Mapping, Sequence
from json import encoder as json_encoder
from types import MappingProxyType
from typing import Any, NamedTuple, Protocol

from ..errors import CodecMismatch, InvalidArgument, SerializationError, UnencodableArgument
from .tags import KEY, Refused, reduce, untag

__all__ = [
    "Call",
    "Codec",
    "JsonCodec",
    "JSON",
    "MSGPACK_LEADS",
    "argument_error",
    "check_json_depth",
    "codec_named",
    "json_depth",
    "peek_call",
]

_DEEP = "nested too deeply (RecursionError)"


_STRING = re.compile(r'"(?:[^"\\]|\\.)*"?', re.DOTALL)  # a JSON string (or its unended start)


def json_depth(text: str, limit: int) -> int:
    """How deep arrays and objects nest in JSON ``text`` (strings skipped), counted by a
    scan, never by recursion; the scan stops once ``limit`` is passed (answers
    ``limit + 1``). Malformed text is the parser's to refuse."""
    depth = deepest = 0
    for char in _STRING.sub("", text):
        if char in "[{":
            depth += 1
            if depth > deepest:
                deepest = depth
                if deepest > limit:
                    break
        elif char in "]}":
            depth -= 1
    return deepest


def check_json_depth(text: str, what: str, limit: int) -> None:
    """Refuse JSON ``text`` nested deeper than ``limit`` before it is parsed (Python's
    parser recurses: a deep enough text would end in ``RecursionError``).

    Raises:
        SerializationError: nested deeper than ``limit``, naming ``what``.
    """
    if json_depth(text, limit) > limit:
        raise SerializationError(
            f"{what} nest arrays and objects deeper than {limit} levels (the limit)"
        )


class Call(NamedTuple):
    """A decoded payload: which task, with which arguments. (A named tuple: a worker makes
    one per job, and a frozen attrs class costs three times as much to build.)"""

    task: str
    args: tuple[Any, ...] = ()
    kwargs: Mapping[str, Any] = MappingProxyType({})


class Codec(Protocol):
    """How payloads and results become bytes (and back)."""

    def encode_call(self, task: str, args: Sequence[Any], kwargs: Mapping[str, Any]) -> bytes: ...

    def decode_call(self, payload: bytes) -> Call: ...

    def encode_result(self, value: Any) -> bytes: ...

    def decode_result(self, data: bytes) -> Any: ...


# json.dumps(value, separators=..., allow_nan=False) builds this encoder on every call
# (non-default arguments): built once, the same output for a third of the time.
# The tagged types (rule 1) reach the encoder's ``default`` hook, which counts the tags
# it writes: JSON text with more '"__emq__":' keys than that has a user's dict with the
# key, and is written again by _escaped (the common payload pays one substring search).
_TAGS = threading.local()
# what a call's envelope ends with after its kwargs: the plain one's, a tagged one's (rule 1)
_PLAIN_END = "}"
_TAGGED_END = ',"tagged":true}'
_MARK = '"' + KEY + '":'
_MARK_BYTES = KEY.encode()


def _default(value: Any) -> Any:
    tag, carried = reduce(value)
    if tag is None:
        return carried
    _TAGS.n += 1
    return {KEY: tag, "v": carried}


def _escaped(value: Any) -> Any:
    """``value`` as plain JSON values with its tags, a dict with the key as the ``dict``
    escape (``_model/tags.py``)."""
    kind = type(value)
    if kind is str or kind is int or kind is float or kind is bool or value is None:
        return value
    if kind is dict:
        out = {k: _escaped(v) for k, v in value.items()}
        if KEY in out:
            return {KEY: "dict", "v": [[k, v] for k, v in out.items()]}
        return out
    if kind is list or kind is tuple:
        return [_escaped(v) for v in value]
    if isinstance(value, str | int | float):  # a subclass (an IntEnum...): as the encoder
        return value  # writes it, its base type's text
    tag, carried = reduce(value)
    if tag is None:
        return _escaped(carried)
    return {KEY: tag, "v": _escaped(carried)}


def _hook(obj: dict[str, Any]) -> Any:
    """A decoded JSON object, or the value its tag stands for."""
    if KEY not in obj:
        return obj
    if len(obj) != 2 or "v" not in obj:
        raise SerializationError(
            f"an object with the reserved key {KEY!r} is not a tagged value: {obj!r:.80}"
        )
    return untag(obj[KEY], obj["v"])


_ENCODER = json.JSONEncoder(separators=(",", ":"), allow_nan=False, default=_default)
# ... and _ENCODER.encode builds its C encoder on every call: this one is made once, with
# _ENCODER's options but without circular-reference markers (a markers dict shared by
# threads would see the other threads' values): a circular value recurses until
# RecursionError and is then encoded by _ENCODER, for its own error. None where the C
# accelerator is missing (_ENCODER does everything there).
_MAKE_ENCODER: Any = getattr(json_encoder, "c_make_encoder", None)  # (untyped in typeshed)
_C_ENCODE: Any = (
    _MAKE_ENCODER(
        None,
        _default,
        json_encoder.encode_basestring_ascii,
        None,
        ":",
        ",",
        False,
        False,
        False,
    )
    if _MAKE_ENCODER is not None
    else None
)
_QUOTE = json_encoder.encode_basestring_ascii
# encode_call's '{"task":<name>,"args":' per task name (a producer has a few tasks)
_HEADS: dict[str, str] = {}
_HEADS_MAX = 1024


def _json(value: Any) -> str:
    """``value`` as _ENCODER encodes it (the C encoder made once when there is one), a
    user's dict with the reserved key escaped.

    Raises:
        TypeError (Refused), ValueError, RecursionError: as the encoder does.
    """
    _TAGS.n = 0
    if _C_ENCODE is None:
        text: str = _ENCODER.encode(value)
    else:
        try:
            text = "".join(_C_ENCODE(value, 0))
        except RecursionError:  # a circular value: its own error (or deep: this one)
            _TAGS.n = 0
            text = _ENCODER.encode(value)
    if _MARK in text and text.count(_MARK) != _TAGS.n:
        _TAGS.n = 1  # (the escape writes the key: tagged)
        return _ENCODER.encode(_escaped(value))
    return text


# the C scanner json.loads ends in (not in typeshed's JSONDecoder)
_SCAN: Callable[[str, int], tuple[Any, int]] = json.JSONDecoder().scan_once  # type: ignore[attr-defined]


def _loads(data: bytes) -> Any:
    """``json.loads(data)``, the same value or error, without its per-call steps for the
    common case (UTF-8 with no surrounding whitespace): the scanner alone (about a
    third of the time). Anything else goes through ``json.loads`` itself."""
    if type(data) is not bytes:
        return json.loads(data)
    try:
        text = data.decode()
        value, end = _SCAN(text, 0)
    except (ValueError, StopIteration):  # not UTF-8 (UTF-16/32 JSON too), or not JSON:
        return json.loads(data)  # json.loads' own value or error
    if end != len(text):
        return json.loads(data)
    return value


def _read(data: bytes) -> Any:
    """``_loads(data)`` with the tags decoded (only text that has the key pays the hook).

    Raises:
        SerializationError: a bad tag; ValueError, RecursionError: as ``json.loads``.
    """
    if isinstance(data, bytes | bytearray) and _MARK_BYTES not in data:
        return _loads(data)
    if isinstance(data, str) and KEY not in data:
        return _loads(data)
    return json.loads(data, object_hook=_hook)


#: the first bytes of a msgpack map (a call), never the first byte of JSON text
MSGPACK_LEADS = frozenset([*range(0x80, 0x90), 0xDE, 0xDF])


def _detail(exc: BaseException) -> tuple[str, str | None]:
    """(what went wrong, the type refused) of an encoder's error."""
    if isinstance(exc, RecursionError):
        return _DEEP, None
    if isinstance(exc, Refused):
        return str(exc), exc.kind
    if isinstance(exc, UnencodableArgument):
        return exc.detail, exc.kind
    return str(exc), None


def argument_error(
    encode: Callable[[Any], object],
    args: Sequence[Any],
    kwargs: Mapping[str, Any],
    codec: str,
) -> UnencodableArgument | None:
    """The first argument ``encode`` refuses, as the error that names it (by position or
    keyword; the producer puts the parameter's name on a position). None: each encodes
    alone."""
    named: list[tuple[int | str, Any]] = [*enumerate(args), *kwargs.items()]
    for where, value in named:
        try:
            encode(value)
        except (TypeError, ValueError, OverflowError, RecursionError) as exc:
            detail, kind = _detail(exc)
            return UnencodableArgument(where, detail, kind, codec=codec)
    return None


class JsonCodec:
    """The default codec: compact JSON, UTF-8, the tagged types of ``_model/tags.py``;
    other values are refused, never pickled."""

    name = "json"

    def _dumps(self, value: Any, what: str) -> bytes:
        return self._text(value, what).encode()

    def _text(self, value: Any, what: str) -> str:
        """``value`` as compact ASCII JSON text (SerializationError when it is not JSON)."""
        try:
            return _json(value)
        except RecursionError:
            raise SerializationError(f"{what} cannot be encoded as JSON: {_DEEP}") from None
        except (TypeError, ValueError) as exc:
            raise SerializationError(f"{what} cannot be encoded as JSON: {exc}") from None

    def encode_call(self, task: str, args: Sequence[Any], kwargs: Mapping[str, Any]) -> bytes:
        """``{"task": task, "args": [...], "kwargs": {...}}`` as compact JSON, written
        around the encoded arguments (the same bytes as the dict's encoding: the text is
        ASCII, so it is encoded once, whole); the head is made once per task name."""
        head = _HEADS.get(task) if type(task) is str else None
        if head is None:
            if not isinstance(task, str) or not task:
                raise SerializationError("task name must be a non-empty str")
            head = '{"task":' + _QUOTE(task) + ',"args":'
            if type(task) is str:
                if len(_HEADS) >= _HEADS_MAX:
                    _HEADS.clear()
                _HEADS[task] = head
        if type(args) is not list and type(args) is not tuple:
            args = list(args)
        try:
            if not kwargs:
                text = self._text(args, "arguments")
                end = _TAGGED_END if _TAGS.n else _PLAIN_END  # (module rule 1)
                return (head + text + ',"kwargs":{}' + end).encode()
            kw = kwargs if type(kwargs) is dict else dict(kwargs)
            kw_text = self._text(kw, "arguments")  # (checked first)
            tagged = _TAGS.n
            text = self._text(args, "arguments")
            end = _TAGGED_END if tagged or _TAGS.n else _PLAIN_END
            return (head + text + ',"kwargs":' + kw_text + end).encode()
        except SerializationError as exc:  # rule 2: which argument
            named = argument_error(_json, args, kwargs, self.name)
            if named is None:
                raise
            raise named from exc.__cause__

    def decode_call(self, payload: bytes) -> Call:
        try:
            data = _loads(payload)
            if "tagged" in data:  # (module rule 1: only a tagged call looks for tags)
                data = json.loads(payload, object_hook=_hook)
            task = data["task"]
            args = data.get("args", [])
            kwargs = data.get("kwargs", {})
        except SerializationError:
            raise
        except (ValueError, TypeError, KeyError, AttributeError) as exc:
            if payload[:1] and payload[0] in MSGPACK_LEADS:
                raise CodecMismatch(self.name, "msgpack") from None
            raise SerializationError(f"payload is not an echomq call: {exc}") from None
        except RecursionError:
            raise SerializationError(f"payload is not an echomq call: {_DEEP}") from None
        if not isinstance(task, str) or not isinstance(args, list) or not isinstance(kwargs, dict):
            raise SerializationError("payload is not an echomq call: bad field types")
        return Call(task=task, args=tuple(args), kwargs=kwargs)

    def encode_result(self, value: Any) -> bytes:
        if value is None:  # most tasks answer nothing
            return b"null"
        if type(value) is str:  # the same text as the encoder's, without its steps
            return _QUOTE(value).encode()
        return self._dumps(value, "result")

    def decode_result(self, data: bytes) -> Any:
        try:
            return _read(data)
        except SerializationError:
            raise
        except RecursionError:
            raise SerializationError(f"result is not JSON: {_DEEP}") from None
        except ValueError as exc:
            raise SerializationError(f"result is not JSON: {exc}") from None


JSON = JsonCodec()


def peek_call(payload: bytes) -> Call:
    """A call of either codec as stored, for display (the dashboard): tagged values are
    left as their tag objects ``{"__emq__": tag, "v": value}`` and no class is looked up.

    Raises:
        SerializationError: not a call of either codec (msgpack one: msgpack missing).
    """
    if payload[:1] and payload[0] in MSGPACK_LEADS:
        from .msgpack_codec import msgpack_codec

        try:
            return msgpack_codec().peek_call(payload)
        except InvalidArgument as exc:  # msgpack is not installed here
            raise SerializationError(str(exc)) from None
    try:
        data = _loads(payload)
        call = Call(
            task=data["task"], args=tuple(data.get("args", [])), kwargs=data.get("kwargs", {})
        )
    except RecursionError:
        raise SerializationError(f"payload is not an echomq call: {_DEEP}") from None
    except (ValueError, TypeError, KeyError, AttributeError) as exc:
        raise SerializationError(f"payload is not an echomq call: {exc}") from None
    if not isinstance(call.task, str) or not isinstance(call.kwargs, dict):
        raise SerializationError("payload is not an echomq call: bad field types")
    return call


def codec_named(codec: Codec | str) -> Codec:
    """The codec ``Queue(codec=...)`` names: ``"json"``, ``"msgpack"`` (the optional
    ``msgpack`` package, ``pip install echomq[msgpack]``), or a codec object as given.

    Raises:
        InvalidArgument: an unknown name, or msgpack not installed.
    """
    if not isinstance(codec, str):
        return codec
    if codec == "json":
        return JSON
    if codec == "msgpack":
        from .msgpack_codec import msgpack_codec

        return msgpack_codec()
    raise InvalidArgument(f"codec must be 'json', 'msgpack' or a Codec, not {codec!r:.80}")
