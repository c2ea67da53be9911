"""The payload types of both codecs: round trips (hypothesis), the reserved key, plain JSON
from other languages read as json.loads reads it, classes decoded only when loaded and
of their kind, and an unencodable argument named."""

from __future__ import annotations

import dataclasses
import datetime as dt
import enum
import json
import math
import uuid
from decimal import Decimal
from typing import Any

import attrs
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from echomq._model.codec import JSON, Codec, codec_named
from echomq.errors import CodecMismatch, SerializationError, UnencodableArgument

MSGPACK = codec_named("msgpack")
CODECS = [JSON, MSGPACK]


class Color(enum.Enum):
    RED = "red"
    BLUE = 2


class Level(enum.IntEnum):
    LOW = 1
    HIGH = 9


@dataclasses.dataclass(frozen=True)
class Point:
    x: int
    label: str = ""
    seen: dt.datetime | None = None
    cached: int = dataclasses.field(default=0, init=False, compare=False)


@attrs.frozen
class Box:
    _size: int  # an attrs private attribute: its init alias is "size"
    items: list[Any] = attrs.field(factory=list)


def _zones() -> st.SearchStrategy[dt.timezone]:
    minutes = st.integers(min_value=-23 * 60 - 59, max_value=23 * 60 + 59)
    return minutes.map(lambda m: dt.timezone(dt.timedelta(minutes=m)))


_int = st.integers(min_value=-(2**63), max_value=2**64 - 1)  # (msgpack's range)
_naive = st.datetimes()
_aware = st.datetimes(timezones=_zones())
_hashable = st.one_of(
    _int,
    st.text(max_size=10),
    st.uuids(),
    st.dates(),
    st.tuples(st.integers(min_value=0, max_value=9), st.text(max_size=3)),
)
LEAVES = st.one_of(
    st.none(),
    st.booleans(),
    _int,
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=20),
    st.binary(max_size=20),
    _naive,
    _aware,
    st.dates(),
    st.times(),
    st.times(timezones=_zones()),
    st.timedeltas(),
    st.uuids(),
    st.decimals(allow_nan=False, allow_infinity=True),
    st.sampled_from(Color),
    st.sampled_from(Level),
    st.frozensets(_hashable, max_size=4),
    st.sets(_hashable, max_size=4),
    st.builds(Point, _int, st.text(max_size=5), st.one_of(st.none(), _aware)),
)
_keys = st.one_of(st.text(max_size=8), st.just("__emq__"), st.just("v"))
VALUES = st.recursive(
    LEAVES,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.dictionaries(_keys, inner, max_size=4),
        st.builds(Box, _int, st.lists(inner, max_size=3)),
    ),
    max_leaves=25,
)


def same(a: Any, b: Any) -> bool:
    """Equal, and of the same types all the way down (an aware datetime with its offset)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, dt.datetime | dt.time):
        return a == b and a.tzinfo == b.tzinfo and str(a) == str(b)
    if isinstance(a, Decimal):
        return str(a) == str(b)
    if isinstance(a, Box):
        return same(a._size, b._size) and same(a.items, b.items)
    if isinstance(a, Point):
        return same(a.x, b.x) and same(a.label, b.label) and same(a.seen, b.seen)
    return bool(a == b)


def _expected(value: Any, codec: Codec) -> Any:
    """What comes back: an IntEnum member is an int to JSON (it is one)."""
    if isinstance(value, Level) and codec is JSON:
        return int(value)
    if isinstance(value, list):
        return [_expected(v, codec) for v in value]
    if isinstance(value, dict):
        return {k: _expected(v, codec) for k, v in value.items()}
    if isinstance(value, Box):
        return Box(value._size, _expected(value.items, codec))
    return value


@pytest.mark.parametrize("codec", CODECS, ids=["json", "msgpack"])
@settings(max_examples=300, deadline=None)
@given(value=VALUES)
def test_every_carried_type_round_trips(codec: Codec, value: Any) -> None:
    """A result, and the same value as an argument and a keyword argument, come back as
    the same types and values (nested, with user dicts that use the reserved key)."""
    back = codec.decode_result(codec.encode_result(value))
    assert same(back, _expected(value, codec)), (value, back)
    call = codec.decode_call(codec.encode_call("t", [value], {"k": value}))
    assert same(call.args[0], _expected(value, codec))
    assert same(call.kwargs["k"], _expected(value, codec))


_PLAIN_JSON = st.recursive(
    st.one_of(
        st.none(),
        st.booleans(),
        st.integers(),
        st.floats(allow_nan=False, allow_infinity=False),
        st.text(),
    ),
    lambda inner: (
        st.lists(inner) | st.dictionaries(st.text().filter(lambda k: k != "__emq__"), inner)
    ),
    max_leaves=30,
)


@settings(max_examples=300, deadline=None)
@given(value=_PLAIN_JSON, spaced=st.booleans())
def test_plain_json_from_another_language_reads_as_json_loads(value: Any, spaced: bool) -> None:
    """JSON without the reserved key is read exactly as json.loads reads it, whatever
    produced it (spacing, escapes, text that mentions the key)."""
    data = json.dumps({"task": "t", "args": [value, "__emq__"], "kwargs": {"k": value}},
                      indent=1 if spaced else None, ensure_ascii=not spaced).encode()  # fmt: skip
    call = JSON.decode_call(data)
    assert call.args == (value, "__emq__") and call.kwargs == {"k": value}
    assert same(JSON.decode_result(json.dumps(value).encode()), value)


def test_the_tag_format_is_a_reserved_single_key_object() -> None:
    """The documented wire format: {"__emq__": tag, "v": value}; a user's dict with the
    key is the "dict" escape, and comes back as the same dict."""
    when = dt.datetime(2026, 1, 2, 3, 4, 5, 6, tzinfo=dt.timezone(dt.timedelta(hours=2)))
    data = JSON.encode_result([when, uuid.UUID(int=1), Decimal("1.10"), {"__emq__": 1}])
    assert json.loads(data) == [
        {"__emq__": "datetime", "v": "2026-01-02T03:04:05.000006+02:00"},
        {"__emq__": "uuid", "v": "00000000-0000-0000-0000-000000000001"},
        {"__emq__": "decimal", "v": "1.10"},
        {"__emq__": "dict", "v": [["__emq__", 1]]},
    ]
    assert JSON.encode_result(Color.RED) == b'{"__emq__":"enum","v":["%s:Color","red"]}' % (
        __name__.encode()
    )
    naive = JSON.decode_result(JSON.encode_result(dt.datetime(2026, 1, 2)))
    assert naive == dt.datetime(2026, 1, 2) and naive.tzinfo is None


@pytest.mark.parametrize(
    "data",
    [
        b'{"__emq__":"uuid"}',  # no "v"
        b'{"__emq__":"uuid","v":"x","w":1}',  # a third key
        b'{"__emq__":"nope","v":1}',  # an unknown tag
        b'{"__emq__":"uuid","v":"not a uuid"}',
        b'{"__emq__":"datetime","v":5}',
        b'{"__emq__":"bytes","v":"!!"}',
    ],
)
def test_a_malformed_tag_is_a_serialization_error(data: bytes) -> None:
    with pytest.raises(SerializationError):
        JSON.decode_result(data)


def _dataclass_tag(path: str, fields: dict[str, Any]) -> bytes:
    return json.dumps({"__emq__": "dataclass", "v": [path, fields]}).encode()


@pytest.mark.parametrize(
    ("data", "match"),
    [
        (_dataclass_tag("os:system", {}), "not found|not a dataclass"),
        (_dataclass_tag("builtins:eval", {}), "not a dataclass"),
        (_dataclass_tag("subprocess:Popen", {"args": "true"}), "not loaded|not a dataclass"),
        (_dataclass_tag("no_such_module_here:Thing", {}), "no_such_module_here.*not loaded"),
        (_dataclass_tag(f"{__name__}:Color", {}), "not a dataclass"),
        (_dataclass_tag(f"{__name__}:Missing", {}), f"{__name__}:Missing.*not found"),
        (_dataclass_tag(f"{__name__}:Point", {"x": 1, "cached": 5}), "no init field"),
        (_dataclass_tag(f"{__name__}:Point", {}), "refused its fields"),
        (b'{"__emq__":"enum","v":["%s:Color","green"]}' % __name__.encode(), "Color"),
        (b'{"__emq__":"enum","v":["%s:Point",1]}' % __name__.encode(), "not a enum"),
        (b'{"__emq__":"attrs","v":["%s:Point",{}]}' % __name__.encode(), "not a attrs"),
    ],
)
def test_classes_are_decoded_only_when_loaded_and_of_their_kind(data: bytes, match: str) -> None:
    """A class tag never imports, never calls anything but a dataclass, attrs class or
    enum of that kind, and names the class it could not build."""
    with pytest.raises(SerializationError, match=match):
        JSON.decode_result(data)


def test_a_class_defined_in_a_function_is_refused_when_encoded() -> None:
    @dataclasses.dataclass
    class Local:
        x: int

    for codec in CODECS:
        with pytest.raises(UnencodableArgument, match="defined in a function") as info:
            codec.encode_call("t", [1], {"p": Local(1)})
        assert info.value.argument == "p"


@pytest.mark.parametrize("codec", CODECS, ids=["json", "msgpack"])
def test_an_unencodable_argument_is_named_with_its_type(codec: Codec) -> None:
    class Opaque:
        pass

    with pytest.raises(UnencodableArgument) as info:
        codec.encode_call("t", [1, [dt.date.today(), Opaque()]], {})
    assert info.value.argument == 1 and info.value.kind is not None
    assert info.value.kind.endswith("Opaque") and "Opaque" in str(info.value)
    with pytest.raises(UnencodableArgument, match="argument 'k'"):
        codec.encode_call("t", [], {"k": 1j})


def test_json_refuses_nan_and_msgpack_refuses_huge_ints_naming_them() -> None:
    with pytest.raises(UnencodableArgument, match="argument 0"):
        JSON.encode_call("t", [math.nan], {})
    with pytest.raises(UnencodableArgument, match="argument 0"):
        MSGPACK.encode_call("t", [2**64], {})
    assert JSON.decode_result(JSON.encode_result(2**64)) == 2**64


def test_each_codec_knows_the_others_payload() -> None:
    with pytest.raises(CodecMismatch, match=r"written by the json codec.*is msgpack"):
        MSGPACK.decode_call(JSON.encode_call("t", [1], {}))
    with pytest.raises(CodecMismatch, match=r"written by the msgpack codec.*is json"):
        JSON.decode_call(MSGPACK.encode_call("t", [1], {}))


def test_a_msgpack_timestamp_from_another_language_is_an_aware_datetime() -> None:
    import msgpack

    when = dt.datetime(2026, 5, 1, 12, 0, tzinfo=dt.UTC)
    data = msgpack.packb({"task": "t", "args": [msgpack.Timestamp.from_datetime(when)]})
    assert MSGPACK.decode_call(data).args == (when,)


def test_a_zoneinfo_datetime_keeps_its_instant_and_offset() -> None:
    from zoneinfo import ZoneInfo

    when = dt.datetime(2026, 7, 1, 9, 30, tzinfo=ZoneInfo("Europe/Paris"))
    for codec in CODECS:
        back = codec.decode_result(codec.encode_result(when))
        assert back == when and back.utcoffset() == when.utcoffset()


def test_an_unknown_codec_name_is_refused() -> None:
    from echomq.errors import InvalidArgument

    with pytest.raises(InvalidArgument, match="codec must be"):
        codec_named("pickle")


def test_a_class_tag_never_runs_a_modules_getattr(monkeypatch: pytest.MonkeyPatch) -> None:
    """A module-level __getattr__ (a lazy importer) is never called: names are looked up
    in the module's and the classes' own __dict__."""
    import sys
    import types

    called: list[str] = []
    lazy = types.ModuleType("emq_lazy_module")

    def lazy_getattr(name: str) -> Any:
        called.append(name)
        return Point

    lazy.__getattr__ = lazy_getattr  # type: ignore[method-assign]
    monkeypatch.setitem(sys.modules, "emq_lazy_module", lazy)
    with pytest.raises(SerializationError, match=r"emq_lazy_module:Point.*not found"):
        JSON.decode_result(_dataclass_tag("emq_lazy_module:Point", {"x": 1}))
    assert called == []
    nested = JSON.decode_result(JSON.encode_result(Outer.Inner(3)))
    assert nested == Outer.Inner(3)


class Outer:
    @dataclasses.dataclass
    class Inner:
        n: int


def test_a_call_that_holds_a_tag_says_so_and_only_such_a_call_is_read_for_tags() -> None:
    plain = JSON.encode_call("t", ["__emq__", {"a": 1}], {"k": '"__emq__":'})
    assert b'"tagged"' not in plain
    assert JSON.decode_call(plain).args == ("__emq__", {"a": 1})
    tagged = JSON.encode_call("t", [], {"when": dt.date(2026, 1, 2)})
    assert tagged.endswith(b',"tagged":true}')
    assert JSON.decode_call(tagged).kwargs == {"when": dt.date(2026, 1, 2)}
    escaped = JSON.encode_call("t", [{"__emq__": 1}], {})  # a user's dict with the key
    assert escaped.endswith(b',"tagged":true}')
    assert JSON.decode_call(escaped).args == ({"__emq__": 1},)
    # another producer's tag object without the envelope's key stays the object it wrote
    raw = b'{"task":"t","args":[{"__emq__":"date","v":"2026-01-02"}],"kwargs":{}}'
    assert JSON.decode_call(raw).args == ({"__emq__": "date", "v": "2026-01-02"},)
    flagged = raw[:-1] + b',"tagged":true}'
    assert JSON.decode_call(flagged).args == (dt.date(2026, 1, 2),)
