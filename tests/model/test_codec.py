"""The JSON codec: compact JSON, the same bytes whichever path encodes them (the shared
encoder, the None shortcut), and non-JSON values refused with SerializationError."""

from __future__ import annotations

import json
import math
from typing import Any

import pytest

from echomq._model.codec import JSON
from echomq.errors import SerializationError

VALUES: list[Any] = [None, 0, -1.5, 'é\n"', [1, [2, {}]], {"a": None, "b": [True, False]}, ""]


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
    with pytest.raises(SerializationError, match="arguments cannot be encoded"):
        JSON.encode_call("t", (math.inf,), {})
