"""The JSON codec: compact JSON, the same bytes whichever path encodes them (the shared
encoder, the None shortcut), and non-JSON values refused with SerializationError."""

from __future__ import annotations

import collections
import json
import math
from typing import Any

import pytest

from echomq._model import codec
from echomq._model.codec import JSON
from echomq.errors import SerializationError

VALUES: list[Any] = [
    None, 0, -1.5, 'é\n"', [1, [2, {}]], {"a": None, "b": [True, False]}, "", "ok",
    "\ud800 lone", "中\x00\t\\/",
]  # fmt: skip


@pytest.mark.parametrize("value", VALUES)
def test_results_are_compact_json_and_read_back(value: Any) -> None:
    data = JSON.encode_result(value)
    assert data == json.dumps(value, separators=(",", ":"), allow_nan=False).encode()
    assert JSON.decode_result(data) == value


def test_a_call_is_compact_json_and_decodes_to_its_parts() -> None:
    data = JSON.encode_call("t", (1, "x"), {"k": [None]})
    assert data == b'{"task":"t","args":[1,"x"],"kwargs":{"k":[null]}}'
    call = JSON.decode_call(data)
    assert (call.task, call.args, call.kwargs) == ("t", (1, "x"), {"k": [None]})


def test_non_json_values_are_refused() -> None:
    loop: list[Any] = []
    loop.append(loop)
    for bad in (math.nan, {1j}, object(), loop):
        with pytest.raises(SerializationError, match="result cannot be encoded"):
            JSON.encode_result(bad)
    with pytest.raises(SerializationError, match="argument 0 cannot be encoded"):
        JSON.encode_call("t", (math.inf,), {})


_SAME_AS_LOADS = [
    b'{"task":"t","args":[1,"x"],"kwargs":{}}',
    b'"plain"',
    b"123",
    b" [1, 2] ",  # whitespace around: json.loads' path
    b"[1] x",  # data after the value
    b"\xef\xbb\xbf[1]",  # a UTF-8 byte order mark
    '{"a":"\u00e9\u4e2d"}'.encode(),
    '{"a":1}'.encode("utf-16"),  # UTF-16 JSON, which json.loads detects
    '{"a":1}'.encode("utf-32-le"),
    b'"\\ud800"',  # a lone surrogate escape
    b"\xff\xfe\xfd",  # not text
    b"NaN",
    b"[" * 100 + b"]" * 100,
    b"",
    b'{"a":',
]


@pytest.mark.parametrize("data", _SAME_AS_LOADS)
def test_fast_decoding_answers_as_json_loads(data: bytes) -> None:
    """The scanner-only path gives json.loads' value, or its error type, for any bytes."""
    try:
        expected: Any = json.loads(data)
    except Exception as exc:  # the type is what is compared
        with pytest.raises(type(exc)):
            codec._loads(data)
        return
    value = codec._loads(data)
    if isinstance(expected, float) and math.isnan(expected):
        assert math.isnan(value)
    else:
        assert value == expected and type(value) is type(expected)


CALLS: list[tuple[str, Any, Any]] = [
    ("noop", ("x" * 100,), {}),
    ("t", [1, 2.5, None, True, "é☃\u2028", {"a": [1]}], {"k": 1, "z": "ü"}),
    ('t"ä\\', (), {1: 2, "x": (3,)}),
    ("t", range(3), collections.OrderedDict(b=1, a=2)),
]


@pytest.mark.parametrize(("task", "args", "kwargs"), CALLS)
def test_a_call_is_the_bytes_of_its_dict(task: str, args: Any, kwargs: Any) -> None:
    """encode_call writes the JSON around the encoded arguments: the same bytes as the
    dict {"task", "args", "kwargs"} encoded whole, for any sequence and mapping."""
    expected = json.dumps(
        {"task": task, "args": list(args), "kwargs": dict(kwargs)},
        separators=(",", ":"),
        allow_nan=False,
    ).encode()
    assert JSON.encode_call(task, args, kwargs) == expected


def test_a_circular_argument_is_refused_with_its_own_error() -> None:
    loop: list[Any] = []
    loop.append(loop)
    with pytest.raises(SerializationError, match="Circular reference detected"):
        JSON.encode_call("t", (loop,), {})
    with pytest.raises(SerializationError, match="Circular reference detected"):
        JSON.encode_call("t", (), {"k": loop})


def test_a_task_names_head_is_made_once_and_checked_first() -> None:
    """The '{"task":...,"args":' head is kept per name (the same bytes the second time, a
    non-ASCII name escaped); a bad name is refused before the arguments are encoded, and
    a str subclass is encoded but not kept."""

    class Name(str):
        pass

    for _ in range(2):
        data = JSON.encode_call("t\u00e9", (1,), {})
        assert data == b'{"task":"t\\u00e9","args":[1],"kwargs":{}}'
    assert "t\u00e9" in codec._HEADS
    assert JSON.encode_call(Name("sub"), (), {}) == b'{"task":"sub","args":[],"kwargs":{}}'
    assert "sub" not in codec._HEADS
    for bad in ("", 1, None):
        with pytest.raises(SerializationError, match="task name"):
            JSON.encode_call(bad, (object(),), {})  # type: ignore[arg-type]
