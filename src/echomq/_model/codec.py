"""Payload and result encoding: JSON by default; pickle is never loaded unless enabled.

A job's payload names the task and carries its arguments::

    {"task": "app.send", "args": [...], "kwargs": {...}}

Results are stored as JSON text. Encoding happens before any I/O, so an argument that
cannot be encoded raises :class:`~echomq.errors.SerializationError` and nothing is sent.
Every way a value or a payload can be refused is that one error, including JSON nested
too deeply for Python's recursive codec (a ``RecursionError`` never leaves this module):
valid JSON from another producer may nest deeper than a Python process can follow.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping, Sequence
from json import encoder as json_encoder
from typing import Any, Protocol

import attrs

from ..errors import SerializationError

__all__ = ["Call", "Codec", "JsonCodec", "JSON", "check_json_depth", "json_depth"]

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


@attrs.frozen(kw_only=True)
class Call:
    """A decoded payload: which task, with which arguments."""

    task: str
    args: tuple[Any, ...] = ()
    kwargs: Mapping[str, Any] = attrs.field(factory=dict)


class Codec(Protocol):
    """How payloads and results become bytes (and back)."""

    def encode_call(self, task: str, args: Sequence[Any], kwargs: Mapping[str, Any]) -> bytes: ...

    def decode_call(self, payload: bytes) -> Call: ...

    def encode_result(self, value: Any) -> bytes: ...

    def decode_result(self, data: bytes) -> Any: ...


# json.dumps(value, separators=..., allow_nan=False) builds this encoder on every call
# (non-default arguments): built once, the same output for a third of the time.
_ENCODER = json.JSONEncoder(separators=(",", ":"), allow_nan=False)
# ... and _ENCODER.encode builds its C encoder on every call: this one is made once, with
# _ENCODER's options but without circular-reference markers (a markers dict shared by
# threads would see the other threads' values): a circular value recurses until
# RecursionError and is then encoded by _ENCODER, for its own error. None where the C
# accelerator is missing (_ENCODER does everything there).
_MAKE_ENCODER: Any = getattr(json_encoder, "c_make_encoder", None)  # (untyped in typeshed)
_C_ENCODE: Any = (
    _MAKE_ENCODER(
        None,
        _ENCODER.default,
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
    """``value`` as _ENCODER encodes it (the C encoder made once when there is one)."""
    if _C_ENCODE is None:
        return _ENCODER.encode(value)
    try:
        return "".join(_C_ENCODE(value, 0))
    except RecursionError:
        return _ENCODER.encode(value)  # a circular value: its own error (or deep: this one)


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


class JsonCodec:
    """The default codec: compact JSON, UTF-8; non-JSON values are refused, never pickled."""

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
        if not kwargs:
            return (head + self._text(args, "arguments") + ',"kwargs":{}}').encode()
        kw = kwargs if type(kwargs) is dict else dict(kwargs)
        tail = ',"kwargs":' + self._text(kw, "arguments") + "}"  # (checked first, as before)
        return (head + self._text(args, "arguments") + tail).encode()

    def decode_call(self, payload: bytes) -> Call:
        try:
            data = _loads(payload)
            task = data["task"]
            args = data.get("args", [])
            kwargs = data.get("kwargs", {})
        except RecursionError:
            raise SerializationError(f"payload is not an echomq call: {_DEEP}") from None
        except (ValueError, TypeError, KeyError, AttributeError) as exc:
            raise SerializationError(f"payload is not an echomq call: {exc}") from None
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
            return _loads(data)
        except RecursionError:
            raise SerializationError(f"result is not JSON: {_DEEP}") from None
        except ValueError as exc:
            raise SerializationError(f"result is not JSON: {exc}") from None


JSON = JsonCodec()
